-- wrk script: one http job per POST /v1/jobs, due far in the future so that only the
-- durable enqueue is measured. See docs/api.md, "Measuring".
wrk.method = "POST"
wrk.body   = '{"kind":"http","url":"http://127.0.0.1:9/x","run_at":"2030-01-01T00:00:00Z"}'
wrk.headers["Content-Type"] = "application/json"
