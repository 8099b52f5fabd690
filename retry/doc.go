// Package retry is runlog's retry policy and per-target circuit breaker:
// pure functions of time, usable on their own.
//
// Nothing here reads a clock or a random source. Every time and duration is
// an int64 count of milliseconds (times are milliseconds since the Unix
// epoch); the caller passes the current time now and, for jitter, a random
// r uint32. The same inputs always give the same outputs, which is what lets
// runlog replay its journal into exactly the state it had before a restart.
//
// The rules:
//
//   - Backoff: Delay(p, n) = min(CapMS, BaseMS·2^n), doubled one step at a
//     time so that no step passes the cap and nothing overflows.
//   - Equal jitter: Jitter(d, r) = ⌊d/2⌋ + r mod (⌊d/2⌋+1), in [⌊d/2⌋, 2⌊d/2⌋].
//   - A server-supplied wait (Retry-After) replaces the jittered backoff,
//     as it is (Wait): its bound is the caller's, not CapMS.
//   - Rate limit (Limit, Bucket): a token bucket kept as a theoretical
//     arrival time (GCRA); over any d ms at most Burst + d·rate/1000
//     attempts start.
//   - Slow start (Ramp): after a breaker closes again, its target runs 1
//     attempt at once, one more per success, up to Circuit.SlowStart.
//   - Admission (Admit) checks, in this order, the deadline (DenyLate), the
//     attempts left (DenySpent) and the breaker (DenyOpen). Only an admitted
//     attempt takes one attempt from the Budget.
//   - After an attempt (PlanAfter): a success, a permanent failure and an
//     unsafe failure stop; a retryable failure waits, unless no attempt is
//     left or the deadline falls at or before the next try.
//   - Breaker: closed with the timestamps of recent failures inside a window,
//     open for a cooldown once Threshold of them accumulate, then half-open
//     admitting Probes probes; the first probe to end closes or reopens it.
//
// What counts against a breaker is the caller's choice; runlog counts a
// retryable or unsafe failure, and treats a permanent failure as a success
// (the target answered).
//
// Values are plain data: a Breaker never shares its Fails array with the
// Breaker it was derived from, so callers may keep them in maps by value.
package retry
