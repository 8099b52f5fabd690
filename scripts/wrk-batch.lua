-- wrk script: POST /v1/jobs/batch with 100 http jobs per request, due far in the future so that
-- only the durable enqueue (one fdatasync per batch) is measured. jobs/s = requests/s x 100.
-- Run it against URL/v1/jobs/batch. See docs/api.md, "Measuring".
local job = '{"kind":"http","url":"http://127.0.0.1:9/x","run_at":"2030-01-01T00:00:00Z"}'
local jobs = {}
for i = 1, 100 do jobs[i] = job end
wrk.method = "POST"
wrk.body   = '{"jobs":[' .. table.concat(jobs, ",") .. ']}'
wrk.headers["Content-Type"] = "application/json"
