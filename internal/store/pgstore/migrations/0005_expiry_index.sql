-- runlog: no transaction
-- runlog: compatible from 4
-- runlog schema, version 5: retention that does not scan. The retention
-- DELETE's cutoff depends on each row's state and kind, which no index can
-- range over, so it walked the whole table once a minute (10 M finished
-- jobs: see docs/postgres.md, "Retention"). It now bounds each finished
-- state by its shortest retention of any kind, a range of this index, and
-- checks each candidate's own rule after.
--
-- The index costs one entry per finished job (the outcome's UPDATE of a
-- success wrote none since version 4). It is built CONCURRENTLY, outside a
-- transaction, so that nodes keep running while it is built: a node of
-- version 4 neither needs nor minds it. A build that failed half-way left
-- an invalid index, dropped first.
DROP INDEX CONCURRENTLY IF EXISTS runlog_jobs_expiry;
CREATE INDEX CONCURRENTLY runlog_jobs_expiry ON runlog_jobs (state, finished_at) WHERE state >= 2;
