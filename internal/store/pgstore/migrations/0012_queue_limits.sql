-- runlog: compatible from 9
-- runlog schema, version 12: a rate limit per queue (issue 17). A queue's
-- row gains its rate limit (rate_milli thousandths per second and burst;
-- 0 and 0 for none) and the state of its token bucket as state.Pace holds
-- it: the theoretical arrival time (tat, µs) and the slot of the last job
-- the queue's limit deferred (reserved, µs). A claim locks the rows of the
-- limited queues with those of the bounded ones (FOR NO KEY UPDATE, in
-- name order), applies state.PaceAfter op by op and writes them back in
-- its transaction, so that every node shares one bucket per queue.
--
-- An expand step (columns with constant defaults: nothing is rewritten):
-- nodes of versions 9 to 11 run on it but neither honour nor advance a
-- queue's limit, and their SetQueue drops the row of a queue left with a
-- limit only: set queue limits once every node runs this build.
ALTER TABLE runlog_queues
    ADD COLUMN rate_milli bigint  NOT NULL DEFAULT 0 CHECK (rate_milli >= 0),
    ADD COLUMN burst      integer NOT NULL DEFAULT 0 CHECK (burst >= 0),
    ADD COLUMN tat        bigint  NOT NULL DEFAULT 0,
    ADD COLUMN reserved   bigint  NOT NULL DEFAULT 0;
