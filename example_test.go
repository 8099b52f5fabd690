package runlog_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/runlog/runlog"
)

// Email is the payload of the examples' "email" kind.
type Email struct {
	To      string
	Subject string
}

// A job is enqueued, made durable, run by the handler of its kind, and kept
// for inspection once it has succeeded.
func Example() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)

	done := make(chan struct{})
	r, err := runlog.Open(dir, runlog.Config{
		Logger: quietLogger(),
		Handlers: map[string]runlog.Handler{
			"email": runlog.Handle(func(ctx context.Context, e Email) error {
				fmt.Println("sending to", e.To)
				close(done)
				return nil
			}),
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	id, err := r.Enqueue(ctx, "email", Email{To: "ada@example.com", Subject: "hi"})
	if err != nil {
		panic(err)
	}
	<-done
	for {
		j, _ := r.Job(ctx, id)
		if j.State == runlog.StateSucceeded {
			fmt.Println(j.State, "after", j.Attempts, "attempt")
			break
		}
		time.Sleep(time.Millisecond) // an example has no testing.T: it polls the job as a program would
	}
	r.Close(ctx)
	// Output:
	// sending to ada@example.com
	// succeeded after 1 attempt
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
		for {
			j, _ := r.Job(ctx, id)
			if j.State == runlog.StateSucceeded || j.State == runlog.StateFailed {
				fmt.Printf("%s: %s after %d attempts", j.Kind, j.State, j.Attempts)
				if j.Reason != "" {
					fmt.Print(": ", j.Reason)
				}
				fmt.Println()
				break
			}
			time.Sleep(time.Millisecond) // an example has no testing.T: it polls the job as a program would
		}
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
	for {
		j, _ := r.Job(context.Background(), id)
		if j.State == runlog.StateSucceeded {
			fmt.Println("ran again; attempts:", j.Attempts)
			break
		}
		time.Sleep(time.Millisecond) // an example has no testing.T: it polls the job as a program would
	}
	r.Close(context.Background())
	// Output:
	// true
	// ran again; attempts: 2
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
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "call", nil, runlog.Target("https://api.example.com:443"))
	for {
		if j, _ := r.Job(ctx, id); j.Attempts == 1 && j.State == runlog.StatePending {
			break
		}
		time.Sleep(time.Millisecond) // an example has no testing.T: it polls the job as a program would
	}
	st, _ := r.Stats(ctx)
	fmt.Println(st.Pending, st.Targets[0].Target, st.Targets[0].State)
	r.Close(ctx)
	// Output: 1 https://api.example.com:443 open
}
