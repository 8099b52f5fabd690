-- runlog schema, version 1: jobs, their idempotency keys, and one circuit
-- breaker per target. Times are ms since the Unix epoch as the engine passes
-- them (its clock), except lease_until, which is on the database clock so
-- that nodes with skewed clocks agree on when a lease expired.
CREATE TABLE runlog_jobs (
    id          bigint   PRIMARY KEY,
    -- 0 pending, 1 running, 2 succeeded, 3 failed, 4 cancelled (state.JobState)
    state       smallint NOT NULL,
    kind        text     NOT NULL,
    target      text     NOT NULL,
    payload     bytea,
    key         text     NOT NULL DEFAULT '',
    attempts    integer  NOT NULL,
    base_ms     bigint   NOT NULL,
    cap_ms      bigint   NOT NULL,
    deadline_ms bigint   NOT NULL,
    timeout_ms  bigint   NOT NULL,
    due         bigint   NOT NULL,
    first_due   bigint   NOT NULL,
    enqueued_at bigint   NOT NULL,
    finished_at bigint   NOT NULL DEFAULT 0,
    fails       integer  NOT NULL DEFAULT 0,
    started     bigint   NOT NULL DEFAULT 0,
    last_error  text     NOT NULL DEFAULT '',
    reason      text     NOT NULL DEFAULT '',
    -- the most recent attempts, oldest first, each with the node that ran it
    history     jsonb    NOT NULL DEFAULT '[]',
    -- the node that started the latest attempt, and its lease while running
    node        text     NOT NULL DEFAULT '',
    lease_until timestamptz
);

CREATE SEQUENCE runlog_job_id OWNED BY runlog_jobs.id;

-- claims: due pending jobs in (due, id) order
CREATE INDEX runlog_jobs_due ON runlog_jobs (due, id) WHERE state = 0;
-- a key is held while its job is kept, finished or not (retention releases it)
CREATE UNIQUE INDEX runlog_jobs_key ON runlog_jobs (key) WHERE key <> '';
-- heartbeats and rescue
CREATE INDEX runlog_jobs_lease ON runlog_jobs (lease_until) WHERE state = 1;
CREATE INDEX runlog_jobs_node ON runlog_jobs (node) WHERE state = 1;
-- stats and target load
CREATE INDEX runlog_jobs_state ON runlog_jobs (state, target);
-- retention
CREATE INDEX runlog_jobs_finished ON runlog_jobs (finished_at) WHERE state >= 2;

CREATE TABLE runlog_breakers (
    target text     PRIMARY KEY,
    -- 0 closed, 1 open, 2 half-open (retry.BreakerState)
    state  smallint NOT NULL DEFAULT 0,
    fails  bigint[] NOT NULL DEFAULT '{}',
    until  bigint   NOT NULL DEFAULT 0,
    busy   integer  NOT NULL DEFAULT 0
);
