// Package runlog is a durable job runner that an application embeds: no
// server to run, a journal directory on local disk.
//
//	type Email struct{ To string }
//
//	func (Email) Kind() string { return "email" }
//
//	handlers := map[string]runlog.Handler{}
//	runlog.AddHandler(handlers, func(ctx context.Context, m Email) error { return send(ctx, m) })
//	r, err := runlog.Open("./jobs", runlog.Config{Handlers: handlers})
//	id, err := r.EnqueueArgs(ctx, Email{To: "a@example.com"}, runlog.Key("welcome-42"))
//	job, err := r.Wait(ctx, id) // its end: succeeded, failed (with the reason) or cancelled
//	...
//	err = r.Close(ctx)
//
// A payload type that names its kind (JobArgs) ties the two together: a
// value can only be enqueued as its own kind, and a kind that no handler
// takes is refused at enqueue. The untyped path (Handle under any kind,
// Enqueue with a kind and a payload, JobRequest) stays for kinds that are
// not Go types, such as the HTTP server's.
//
// Around the engine: Subscribe tells of every job's life as it happens
// (with a bounded buffer that drops rather than waits); Config.Middleware
// wraps every attempt and Config.EnqueueMiddleware every enqueue;
// Observer and JobObserver feed metrics. Package runlogtest tests
// handlers and the code that enqueues; packages dashboard and httpapi
// mount the web dashboard and the JSON API in an application's server;
// package postgres runs the same API on PostgreSQL.
//
// # Guarantees
//
// Durable means written to the journal and flushed with fdatasync (and the
// directory synced when a file is created or renamed). Every change of a job
// is one journal record, and nothing acts on a change before its record is
// durable: Enqueue returns the id only after the job's record is durable; an
// attempt starts only after its start record is durable; an outcome (success,
// a retry at a later time, death with the reason) is reported only after its
// record is durable. Many changes in flight share one fdatasync (group
// commit), so durability costs little per job.
//
// Delivery is at least once. If the process dies, Open replays the journal
// and gets back exactly the state after the last durable record; every
// attempt that was running is requeued, counted as a failed attempt, and runs
// again. A handler therefore gets the job id and attempt number (AttemptFrom)
// to deduplicate its effects downstream.
//
// Nothing is lost and nothing is silent: every job that is not cancelled runs
// until it succeeds, fails permanently, or spends its attempts or deadline,
// and a job that stops is kept in state "failed" with the reason, and can be
// retried by hand (Runner.Retry).
//
// # Scheduling
//
// Due jobs start in (due time, id) order as soon as the pool (Concurrency)
// has a free slot: one dispatcher sleeps until the next due time or a wake-up
// (an enqueue, an ended attempt); a slow attempt never delays another. Due
// times are wall-clock: with the system clock on Linux the dispatcher sleeps
// on the wall clock itself and never polls, so a step of the clock is
// noticed at once; otherwise it looks again every 10 s while a job waits in
// the future (see docs/semantics.md, "Wall-clock steps"). Each target (the
// downstream a job talks to; by default its kind) has a circuit breaker:
// after Threshold failures within Window it opens for Cooldown, and the jobs
// it holds back are deferred to when it may admit them again, with no
// attempt counted. Breaker transitions are derived from the
// journaled starts and outcomes, so a restart rebuilds every breaker exactly
// as it was.
package runlog
