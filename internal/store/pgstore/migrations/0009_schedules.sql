-- runlog: compatible from 6
-- runlog schema, version 9: durable schedules (issue 17). A schedule is a
-- row of runlog_schedules: its definition (cron in a time zone, or an
-- interval; the template of its jobs; its overlap and catch-up rules) and
-- its position, last_tick, the latest tick dealt with. A node makes a tick's
-- job in one transaction that locks the row, advances last_tick (only
-- forward: UPDATE ... WHERE last_tick < the tick) and inserts the job, so
-- that each tick makes one job across nodes. A job names its schedule and
-- tick ('' and 0 for a job enqueued by hand). Only adds: older nodes run on.
CREATE TABLE runlog_schedules (
    name        text     PRIMARY KEY,
    cron        text     NOT NULL DEFAULT '',
    every_ms    bigint   NOT NULL DEFAULT 0,
    zone        text     NOT NULL DEFAULT '',
    -- 'allow' or 'skip'; 'latest', 'skip' or 'all' (state.Overlap, state.CatchUp)
    overlap     text     NOT NULL,
    catch_up    text     NOT NULL,
    kind        text     NOT NULL,
    target      text     NOT NULL,
    payload     bytea,
    attempts    integer  NOT NULL,
    base_ms     bigint   NOT NULL,
    cap_ms      bigint   NOT NULL,
    deadline_ms bigint   NOT NULL,
    timeout_ms  bigint   NOT NULL,
    queue       text     NOT NULL DEFAULT '',
    priority    integer  NOT NULL DEFAULT 0,
    anchor      bigint   NOT NULL,
    last_tick   bigint   NOT NULL,
    last_job    bigint   NOT NULL DEFAULT 0,
    paused      boolean  NOT NULL DEFAULT false,
    created_at  bigint   NOT NULL
);

ALTER TABLE runlog_jobs ADD COLUMN schedule text NOT NULL DEFAULT '';
ALTER TABLE runlog_jobs ADD COLUMN tick bigint NOT NULL DEFAULT 0;
-- GET /v1/jobs?schedule=NAME
CREATE INDEX runlog_jobs_schedule ON runlog_jobs (schedule, id) WHERE schedule <> '';
