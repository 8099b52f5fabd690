-- runlog: compatible from 6
-- runlog schema, version 7: a placeholder on the targets branch only, so
-- that migration 0008 has no gap before it. Version 7 belongs to issue 17's
-- queues (branch flow): the merge replaces this file with that branch's
-- 0007, and a database must never be migrated with this one.
SELECT 1;
