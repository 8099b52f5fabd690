-- runlog: compatible from 1
-- runlog schema, version 2: the running jobs are found through
-- runlog_jobs_state (state, target), as few as the nodes' concurrency, so
-- the partial indexes on lease_until and node while running are dropped:
-- every start and every outcome of an attempt changed both (a start adds
-- an entry to each, and the attempt's UPDATEs are not HOT), and neither
-- made a rescue scan, a heartbeat or a node's requeue cheaper than a scan
-- of the running jobs.
DROP INDEX IF EXISTS runlog_jobs_lease;
DROP INDEX IF EXISTS runlog_jobs_node;
