-- runlog: compatible from 6
-- runlog schema, version 7: each job's string metadata (issue 20: a trace
-- context, a tenant), a JSON object of strings, NULL for none. Nodes of
-- version 6 keep running: they neither write nor read it.
ALTER TABLE runlog_jobs ADD COLUMN metadata jsonb;
