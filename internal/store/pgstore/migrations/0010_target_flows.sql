-- runlog: compatible from 6
-- runlog schema, version 10: each target's flow control (issue 17): its
-- rate limit set at run time, its token bucket (the theoretical arrival
-- time, in µs), the slot of the last job the limit deferred, its own wait
-- (a Retry-After hold, in ms) and its slow start after an outage, as
-- state.Flow holds them. A row exists only for a target that had one;
-- a claim locks the rows of the targets it may start (FOR UPDATE, in
-- target order, after their breakers) and advances their buckets in its
-- own transaction, so that every node shares one bucket per target.
-- An expand step (a table only, independent of versions 7 to 9): nodes of
-- builds 6 to 9 run on it, but they neither honour nor advance the flows
-- until they are upgraded.
CREATE TABLE runlog_flows (
    target      text    PRIMARY KEY,
    limit_set   boolean NOT NULL DEFAULT false,
    rate_milli  bigint  NOT NULL DEFAULT 0,
    burst       integer NOT NULL DEFAULT 0,
    tat         bigint  NOT NULL DEFAULT 0,
    reserved    bigint  NOT NULL DEFAULT 0,
    hold        bigint  NOT NULL DEFAULT 0,
    ramp_window integer NOT NULL DEFAULT 0,
    ramp_busy   integer NOT NULL DEFAULT 0
);
