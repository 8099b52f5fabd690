// Package runlog is a durable job runner that an application embeds: no
// server to run, a journal directory on local disk.
//
//	r, err := runlog.Open("./jobs", runlog.Config{
//		Handlers: map[string]runlog.Handler{
//			"email": runlog.Handle(func(ctx context.Context, m Email) error { return send(ctx, m) }),
//		},
//	})
//	id, err := r.Enqueue(ctx, "email", Email{To: "a@example.com"}, runlog.Key("welcome-42"))
//	...
//	err = r.Close(ctx)
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
