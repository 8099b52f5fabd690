package pgstore

// The codes this store writes for enumerations, in SQL text and in the
// history JSON. They are in every database runlog has written, and in its
// indexes' predicates (runlog_jobs_due is WHERE state = 0): they are
// frozen. Never renumber one; a new value takes a new code.
// TestStoredCodesFrozen pins them to the Go values they stand for.

// The codes of runlog_jobs.state: the values of state.JobState.
const (
	pendingCode   = "0" // state.Pending
	runningCode   = "1" // state.Running
	succeededCode = "2" // state.Succeeded
	failedCode    = "3" // state.Failed
	cancelledCode = "4" // state.Cancelled
)

// pendingBelow is "pending" written as "state < 1" (pending is the only
// code below running's), the predicate of the indexes of version 13
// (runlog_jobs_queue_due, runlog_jobs_queue_priority). A query that says
// it can use them and not runlog_jobs_due or runlog_jobs_priority, whose
// predicate is state = 0 (see liveQueues).
const pendingBelow = "state < " + runningCode

// closedCode is the code of runlog_breakers.state for a closed breaker
// (retry.Closed); open is 1 and half-open 2, the values of
// retry.BreakerState, written as int16(state).
const closedCode = "0"

// An attempt's class is written in the history JSON ("c") as the value of
// retry.Class: 1 success, 2 retryable, 3 permanent, 4 unsafe; 0 (omitted)
// while the attempt has not ended, or when it was interrupted.
