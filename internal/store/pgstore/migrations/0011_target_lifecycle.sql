-- runlog: compatible from 9
-- runlog schema, version 11: the endpoint lifecycle (issue 18). A target
-- that answered gone (http 410) or has failed for the configured time
-- with no success is disabled: its jobs stay pending and the claim skips
-- them until it is enabled by hand. A row of runlog_target_life is a
-- target whose lifecycle is not the zero one (state.TargetLife): failing
-- since failing_since, and/or disabled since disabled_at for reason. The
-- outcome that disables a target writes its row in the same transaction;
-- an enable deletes it. Rows follow the targets in trouble, not history.
--
-- An expand step: nodes of version 9 or 10 run on it but know no disable
-- (they would still attempt a disabled target's jobs): rely on disables
-- once every node runs this build.
CREATE TABLE runlog_target_life (
    target        text    PRIMARY KEY,
    failing       boolean NOT NULL DEFAULT false,
    failing_since bigint  NOT NULL DEFAULT 0,
    disabled      boolean NOT NULL DEFAULT false,
    disabled_at   bigint  NOT NULL DEFAULT 0,
    reason        text    NOT NULL DEFAULT '',
    CHECK (failing OR disabled)
);
