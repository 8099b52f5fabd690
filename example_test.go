package runlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/runlog/runlog"
)

// Email is the payload of the examples' "email" kind: its type names its
// kind, so a value of it can only be enqueued as an email.
type Email struct {
	To      string
	Subject string
}

// Kind names the jobs that carry an Email.
func (Email) Kind() string { return "email" }

// A typed job is enqueued, made durable, run by the handler of its kind,
// waited for, and kept for inspection once it has succeeded.
func Example() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)

	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(ctx context.Context, e Email) error {
		fmt.Println("sending to", e.To)
		return nil
	})
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: handlers})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id, err := r.EnqueueArgs(ctx, Email{To: "ada@example.com", Subject: "hi"})
	if err != nil {
		panic(err)
	}
	j, err := r.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(j.Kind, j.State, "after", j.Attempts, "attempt")
	r.Close(ctx)
	// Output:
	// sending to ada@example.com
	// email succeeded after 1 attempt
}

// A value is tied to its kind: enqueueing a kind that no handler takes, or
// a value of another type than the kind's handler takes, is refused at
// once instead of failing when the job runs.
func ExampleRunner_EnqueueArgs() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(context.Context, Email) error { return nil })
	r, _ := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: handlers})
	ctx := context.Background()

	_, err := r.EnqueueArgs(ctx, invoice{N: 42}) // invoice's kind has no handler here
	fmt.Println(errors.Is(err, runlog.ErrUnknownKind))
	_, err = r.Enqueue(ctx, "email", 42) // the untyped path checks the type too
	fmt.Println(errors.Is(err, runlog.ErrInvalid))
	r.Close(ctx)
	// Output:
	// true
	// true
}

// Handlers say how an attempt ended with their error: nil succeeds, a plain
// error is retried with backoff, Permanent fails the job at once (it is kept
// as "failed" with the reason, and can be retried by hand).
func Example_retry() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)

	calls := 0
	r, _ := runlog.Open(dir, runlog.Config{
		Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{
			"flaky": runlog.Handle(func(ctx context.Context, _ []byte) error {
				calls++
				if calls < 3 {
					return errors.New("temporarily unavailable")
				}
				return nil
			}),
			"bad": runlog.Handle(func(ctx context.Context, _ []byte) error {
				return runlog.Permanent(errors.New("invalid address"))
			}),
		},
	})
	ctx := context.Background()
	fast := runlog.WithRetry(runlog.RetryPolicy{Attempts: 5, Base: time.Millisecond, Cap: 10 * time.Millisecond})
	flaky, _ := r.Enqueue(ctx, "flaky", nil, fast)
	bad, _ := r.Enqueue(ctx, "bad", nil, fast)
	for _, id := range []uint64{flaky, bad} {
		j, _ := r.Wait(ctx, id)
		fmt.Printf("%s: %s after %d attempts", j.Kind, j.State, j.Attempts)
		if j.Reason != "" {
			fmt.Print(": ", j.Reason)
		}
		fmt.Println()
	}
	r.Close(ctx)
	// Output:
	// flaky: succeeded after 3 attempts
	// bad: failed after 1 attempts: permanent failure: invalid address
}

// An idempotency key makes an enqueue safe to repeat: the second one adds
// nothing and answers the first job's id.
func ExampleKey() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, _ := runlog.Open(dir, runlog.Config{
		Logger:   quietLogger(),
		Handlers: map[string]runlog.Handler{"charge": runlog.Handle(func(context.Context, []byte) error { return nil })},
	})
	ctx := context.Background()
	a, _ := r.Enqueue(ctx, "charge", []byte(`{"order":42}`), runlog.Key("order-42"), runlog.RunIn(time.Hour))
	b, _ := r.Enqueue(ctx, "charge", []byte(`{"order":42}`), runlog.Key("order-42"))
	fmt.Println(a == b)
	r.Close(ctx)
	// Output: true
}

// A job runs at its due time: RunIn (on the runner's clock) or RunAt.
func ExampleRunIn() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, _ := runlog.Open(dir, runlog.Config{
		Logger:   quietLogger(),
		Handlers: map[string]runlog.Handler{"reminder": runlog.Handle(func(context.Context, []byte) error { return nil })},
	})
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "reminder", nil, runlog.RunIn(24*time.Hour))
	j, _ := r.Job(ctx, id)
	fmt.Println(j.State, j.DueAt.Sub(j.EnqueuedAt).Round(time.Hour))
	r.Close(ctx)
	// Output: pending 24h0m0s
}

// Subscribe tells of every job's life as it happens, here the attempts that
// end; Wait waits for one job's end.
func ExampleRunner_Subscribe() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	calls := 0
	r, _ := runlog.Open(dir, runlog.Config{
		Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{"call": runlog.Handle(func(context.Context, []byte) error {
			if calls++; calls == 1 {
				return errors.New("503")
			}
			return nil
		})},
	})
	sub := r.Subscribe(100, runlog.EventSucceeded, runlog.EventRetried, runlog.EventFailed)
	defer sub.Close()
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "call", nil, runlog.Target("api.example.com"),
		runlog.WithRetry(runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: time.Millisecond}))
	r.Wait(ctx, id)
	for range 2 {
		ev := <-sub.Events()
		fmt.Println(ev.Type, ev.Target, "attempt", ev.Attempt, ev.Outcome, ev.Error)
	}
	r.Close(ctx)
	// Output:
	// retried api.example.com attempt 1 retryable 503
	// succeeded api.example.com attempt 2 success
}

// Middleware wraps every attempt: here it times each one and turns an
// error the handler marks as bad input into a permanent failure.
func ExampleMiddleware() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	errBadInput := errors.New("bad input")
	permanentOnBadInput := func(next runlog.AttemptFunc) runlog.AttemptFunc {
		return func(ctx context.Context, a runlog.AttemptInfo) error {
			err := next(ctx, a)
			if errors.Is(err, errBadInput) {
				fmt.Println("attempt", a.Attempt, "of job", a.JobID, "had bad input")
				return runlog.Permanent(err)
			}
			return err
		}
	}
	r, _ := runlog.Open(dir, runlog.Config{
		Logger: quietLogger(),
		// RecoverPanics inside LogAttempts: a panic is logged as a failed attempt.
		Middleware: []runlog.Middleware{runlog.LogAttempts(quietLogger()), runlog.RecoverPanics(quietLogger()), permanentOnBadInput},
		Handlers: map[string]runlog.Handler{"parse": runlog.Handle(func(context.Context, []byte) error {
			return fmt.Errorf("line 3: %w", errBadInput)
		})},
	})
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "parse", nil)
	j, _ := r.Wait(ctx, id)
	fmt.Println(j.State, "after", j.Attempts, "attempt")
	r.Close(ctx)
	// Output:
	// attempt 1 of job 1 had bad input
	// failed after 1 attempt
}

// Enqueue middleware sees every enqueue: here it gives a default target to
// jobs that name none (on a copy of the requests).
func ExampleEnqueueMiddleware() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	defaultTarget := func(next runlog.EnqueueFunc) runlog.EnqueueFunc {
		return func(ctx context.Context, reqs []runlog.JobRequest) ([]runlog.EnqueueResult, error) {
			reqs = append([]runlog.JobRequest(nil), reqs...)
			for i := range reqs {
				if reqs[i].Target == "" {
					reqs[i].Target = "smtp.example.com:587"
				}
			}
			return next(ctx, reqs)
		}
	}
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(context.Context, Email) error { return nil })
	r, _ := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: handlers,
		EnqueueMiddleware: []runlog.EnqueueMiddleware{defaultTarget}})
	ctx := context.Background()
	id, _ := r.EnqueueArgs(ctx, Email{To: "ada@example.com"}, runlog.RunIn(time.Hour))
	j, _ := r.Job(ctx, id)
	fmt.Println(j.Target)
	r.Close(ctx)
	// Output: smtp.example.com:587
}

// Close stops starting attempts and waits for the running ones until its
// context ends; what is still running then is requeued by the next Open.
func ExampleRunner_Close() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	started := make(chan struct{})
	r, _ := runlog.Open(dir, runlog.Config{
		Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{"slow": runlog.Handle(func(ctx context.Context, _ []byte) error {
			close(started)
			<-ctx.Done() // a well-behaved handler stops when its context ends
			return ctx.Err()
		})},
	})
	id, _ := r.Enqueue(context.Background(), "slow", nil)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	fmt.Println(errors.Is(r.Close(ctx), context.DeadlineExceeded))

	r, _ = runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"slow": runlog.Handle(func(ctx context.Context, _ []byte) error { return nil }),
	}})
	j, _ := r.Wait(context.Background(), id)
	fmt.Println("ran again:", j.State, "after", j.Attempts, "attempts")
	r.Close(context.Background())
	// Output:
	// true
	// ran again: succeeded after 2 attempts
}

// Stats shows the counts by state and every target's circuit breaker.
func ExampleRunner_Stats() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, _ := runlog.Open(dir, runlog.Config{
		Logger:  quietLogger(),
		Breaker: runlog.BreakerConfig{Threshold: 1, Window: time.Minute, Cooldown: time.Hour, Probes: 1},
		Handlers: map[string]runlog.Handler{"call": runlog.Handle(func(context.Context, []byte) error {
			return errors.New("503")
		})},
	})
	sub := r.Subscribe(10, runlog.EventRetried)
	ctx := context.Background()
	r.Enqueue(ctx, "call", nil, runlog.Target("https://api.example.com:443"))
	<-sub.Events() // the first attempt failed, and its failure opened the breaker
	st, _ := r.Stats(ctx)
	fmt.Println(st.Pending, st.Targets[0].Target, st.Targets[0].State)
	r.Close(ctx)
	// Output: 1 https://api.example.com:443 open
}
