-- runlog schema, version 3: a job's latest attempt moves from the end of
-- its history (jsonb) to a column of its own, latest (the attempt's JSON as
-- text, NULL before the first attempt), which the node that starts or
-- settles the attempt writes whole. A start and an outcome then no longer
-- edit JSON on the server (jsonb_build_object, ||, jsonb_set: about a third
-- of an attempt's UPDATE); only a later attempt's start moves the previous
-- latest into history. history keeps the older attempts, oldest first, so
-- that history plus latest hold the last 32.
--
-- Stop every node of an older version before this runs: an older node
-- still running would go on writing its attempts into history.
ALTER TABLE runlog_jobs ADD COLUMN latest text;
UPDATE runlog_jobs SET latest = (history -> -1)::text, history = history - (-1)
	WHERE jsonb_array_length(history) > 0;
