-- runlog: compatible from 6
-- runlog schema, version 7: queues and priorities (issue 17). Each job
-- names its queue ('' is the default queue, "default" outside the store)
-- and a priority (higher starts first among the due jobs). A queue's
-- setting (its concurrency, 0 for no bound but each node's pool, and
-- whether it is paused) is a row of runlog_queues; a queue without a row
-- has the zero setting. The claim reads the rows of paused or bounded
-- queues, skips the jobs of the paused ones and counts the running
-- attempts of the bounded ones across the nodes.
--
-- The new columns have constant defaults: adding them rewrites nothing.
-- The priority index holds only pending jobs whose priority is not 0, so
-- that a job of priority 0 (the usual one) costs no entry in it; the
-- claim reads those with priority 0 from runlog_jobs_due as before.
-- An expand step: nodes of version 6 run on it while an upgrade rolls
-- (their jobs go to the default queue at priority 0), but they know no
-- queue setting and would start the jobs of a paused queue: pause a queue
-- only once every node runs this build.
ALTER TABLE runlog_jobs
    ADD COLUMN queue    text    NOT NULL DEFAULT '',
    ADD COLUMN priority integer NOT NULL DEFAULT 0;
CREATE INDEX runlog_jobs_priority ON runlog_jobs (priority DESC, due, id) WHERE state = 0 AND priority <> 0;
CREATE TABLE runlog_queues (
    name        text    PRIMARY KEY,
    concurrency integer NOT NULL DEFAULT 0 CHECK (concurrency >= 0),
    paused      boolean NOT NULL DEFAULT false
);
