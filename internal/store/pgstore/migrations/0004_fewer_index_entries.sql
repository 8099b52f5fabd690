-- runlog: compatible from 3
-- runlog schema, version 4: fewer index entries per attempt. Neither UPDATE
-- of an attempt can be HOT (both change state, which the claims' index
-- depends on), so each writes an entry into every index whose predicate
-- its new row matches: version 3 wrote four (the primary key, (state,
-- target) twice, finished_at once) besides the primary key's second.
-- Now a start writes into runlog_jobs_active and an outcome into none but
-- the primary key, unless it fails or cancels the job. With 16 slots,
-- where an attempt's two UPDATEs are on the critical path, W1 went from
-- 4 600-5 700 to 5 200-5 800 jobs/s and the server's CPU from 95-112 to
-- 92-98 us a job (medians 4 800 and 5 550).
--
-- runlog_jobs_state (state, target) becomes runlog_jobs_active, (target)
-- of pending and running jobs only: target load, rescue, a node's requeue.
-- runlog_jobs_finished (finished_at of finished jobs) is dropped: the
-- retention DELETE, whose cutoff depends on each row's state and kind,
-- never used it (planned as a scan of the whole table with it in place). runlog_jobs_ended keeps
-- the failed and cancelled jobs in id order for the dashboard's lists.
--
-- The new indexes are built while the table is locked for writes (this
-- runs in a transaction): on a large table, migrate when no node runs.
DROP INDEX IF EXISTS runlog_jobs_state;
DROP INDEX IF EXISTS runlog_jobs_finished;
CREATE INDEX runlog_jobs_active ON runlog_jobs (target) WHERE state <= 1;
CREATE INDEX runlog_jobs_ended ON runlog_jobs (id) WHERE state >= 3;
