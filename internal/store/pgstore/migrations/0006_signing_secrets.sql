-- runlog: compatible from 5
-- runlog schema, version 6: the signing secrets of runlog serve's http
-- kind (issue 18), kept apart from the jobs: no query of the job table
-- reads them, and the API shows their ids and creation times only.
-- runlog_signing_sender holds the one random sender id that every node
-- puts in its webhook-id values, so that two databases' job 1 are two
-- messages.
CREATE TABLE runlog_signing_secrets (
    target     text        NOT NULL,
    secret_id  text        NOT NULL,
    secret     text        NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (target, secret_id)
);
CREATE TABLE runlog_signing_sender (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    sender text    NOT NULL
);
INSERT INTO runlog_signing_sender (sender) VALUES (md5(random()::text || clock_timestamp()::text));
