-- runlog: no transaction
-- runlog: compatible from 9
-- runlog schema, version 13: claims probe each queue (issue 17). A claim
-- selected the due jobs in (due, id) order from runlog_jobs_due and
-- filtered those of held queues (paused, at their concurrency, past their
-- rate limit), so every claim walked past all of their due jobs: 300 000
-- jobs in a paused queue cost 279 ms a claim. It now lists the queues that
-- have pending jobs by a skip scan of runlog_jobs_queue_due (one probe a
-- queue), leaves the held ones out, and reads each other queue's due jobs
-- from its own range: of priority 0 from runlog_jobs_queue_due, the others
-- from runlog_jobs_queue_priority.
--
-- The predicate "state < 1" means pending (0) as "state = 0" does; it is
-- written apart so that the planner uses these indexes for the queries
-- written for them (see pendingBelow in codes.go).
--
-- An expand step: the indexes are built CONCURRENTLY, so nodes keep
-- running while they are built, and nodes of versions 9 to 12 neither
-- need nor mind them. runlog_jobs_due and runlog_jobs_priority stay while
-- such nodes may run (a later version drops what no build reads). A build
-- that failed half-way left an invalid index, dropped first.
DROP INDEX CONCURRENTLY IF EXISTS runlog_jobs_queue_due;
CREATE INDEX CONCURRENTLY runlog_jobs_queue_due ON runlog_jobs (queue, due, id) WHERE state < 1;
DROP INDEX CONCURRENTLY IF EXISTS runlog_jobs_queue_priority;
CREATE INDEX CONCURRENTLY runlog_jobs_queue_priority ON runlog_jobs (queue, priority DESC, due, id) WHERE state < 1 AND priority <> 0;
