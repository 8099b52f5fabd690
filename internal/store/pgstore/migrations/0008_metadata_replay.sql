-- runlog: compatible from 6
-- runlog schema, version 8: each job's string metadata (issue 20: a trace
-- context, a tenant), a JSON object of strings, NULL for none; and the job
-- a replay re-sends (issue 18: replay_of, 0 for none). Nodes of version 6
-- keep running: they neither write nor read these columns.
ALTER TABLE runlog_jobs ADD COLUMN metadata jsonb;
ALTER TABLE runlog_jobs ADD COLUMN replay_of bigint NOT NULL DEFAULT 0;
