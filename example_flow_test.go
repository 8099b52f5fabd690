package runlog_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/runlog/runlog"
)

// Queues: a paused queue accepts jobs and starts none; resumed, its jobs
// run, the higher priority first.
func ExampleRunner_PauseQueue() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Concurrency: 1, Handlers: map[string]runlog.Handler{
		"report": runlog.Handle(func(ctx context.Context, p []byte) error {
			fmt.Println("report", string(p))
			return nil
		}),
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	r.PauseQueue(ctx, "bulk")
	low, _ := r.Enqueue(ctx, "report", "low", runlog.WithQueue("bulk"))
	high, _ := r.Enqueue(ctx, "report", "high", runlog.WithQueue("bulk"), runlog.WithPriority(10))
	qs, _ := r.Queues(ctx)
	for _, q := range qs {
		if q.Name == "bulk" {
			fmt.Println("bulk paused:", q.Paused, "pending:", q.Pending)
		}
	}
	r.ResumeQueue(ctx, "bulk")
	r.Wait(ctx, high)
	r.Wait(ctx, low)
	// Output:
	// bulk paused: true pending: 2
	// report "high"
	// report "low"
}

// A handler snoozes its job: it runs again later with its retry budget
// untouched.
func ExampleSnooze() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	tries := 0
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"poll": runlog.Handle(func(ctx context.Context, _ []byte) error {
			if tries++; tries < 3 {
				return runlog.Snooze(10 * time.Millisecond) // not ready yet
			}
			return nil
		}),
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "poll", nil, runlog.WithRetry(runlog.RetryPolicy{Attempts: 1, Base: time.Millisecond, Cap: time.Millisecond}))
	j, _ := r.Wait(ctx, id)
	fmt.Println(j.State, "after", tries, "runs with a budget of one attempt")
	// Output: succeeded after 3 runs with a budget of one attempt
}

// A durable schedule: each tick makes one job, across restarts.
func ExampleRunner_CreateSchedule() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"report": runlog.Handle(func(ctx context.Context, _ []byte) error { return nil }),
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	s, err := r.CreateSchedule(context.Background(), runlog.ScheduleRequest{
		Name: "nightly", Cron: "0 3 * * *", TimeZone: "Europe/Paris",
		Job: runlog.JobRequest{Kind: "report"}, Overlap: "skip", CatchUp: "latest",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Name, "next at 03:00 Paris:", s.Next.In(mustZone("Europe/Paris")).Format("15:04"))
	// Output: nightly next at 03:00 Paris: 03:00
}

func mustZone(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}

// A rate limit on a target: at most 5 attempts a second, 2 at once after
// a quiet time; kept across restarts.
func ExampleRunner_SetLimit() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"call": runlog.Handle(func(ctx context.Context, _ []byte) error { return nil }),
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	if err := r.SetLimit(ctx, "partner", runlog.Limit{Rate: 5, Burst: 2}); err != nil {
		panic(err)
	}
	began := time.Now()
	var ids []uint64
	for range 4 {
		id, _ := r.Enqueue(ctx, "call", nil, runlog.Target("partner"))
		ids = append(ids, id)
	}
	for _, id := range ids {
		r.Wait(ctx, id)
	}
	// Two start at once, the other two a token (200 ms) apart.
	fmt.Println("4 calls took at least 400 ms:", time.Since(began) >= 390*time.Millisecond)
	// Output: 4 calls took at least 400 ms: true
}
