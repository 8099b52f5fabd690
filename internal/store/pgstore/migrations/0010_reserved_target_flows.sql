-- runlog: compatible from 9
-- runlog schema, version 10: reserved for the target flows of branch
-- targets2 (issue 17), which brings its own 0010 file. This placeholder
-- only keeps the versions without a gap on the lifecycle branch: drop it
-- when targets2's 0010 is merged (two files of version 10 make every Open
-- fail with "without gaps", so the merge cannot keep both by mistake).
SELECT 1;
