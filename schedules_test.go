package runlog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestScheduleTicksOnTheClock: a schedule's loop sleeps until the next tick
// (a timer at exactly that time, no polling), and the tick's job runs,
// naming its schedule and tick; ticks missed while the runner was closed
// follow the catch-up rule on reopen.
func TestScheduleTicksOnTheClock(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dir := t.TempDir()
	started := make(chan string, 64)
	cfg := runlog.Config{Concurrency: 4, Clock: clock, Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"job": runlog.Handle(func(ctx context.Context, name string) error { started <- name; return nil }),
	}}
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	created := clock.Now()
	sc, err := r.CreateSchedule(ctx, runlog.ScheduleRequest{Name: "every", Every: time.Second, CatchUp: "all",
		Job: runlog.JobRequest{Kind: "job", Payload: []byte(`"tick"`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Next.Equal(created.Add(time.Second)) || sc.CatchUp != "all" || sc.Overlap != "allow" {
		t.Fatalf("created %+v", sc)
	}
	clock.waitTimerAt(t, created.Add(time.Second), "the schedule loop sleeping until the first tick")
	clock.Advance(time.Second)
	testwait.Recv(t, started, "the first tick's job")
	page, err := r.List(ctx, runlog.ListFilter{Schedule: "every"})
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("List(schedule) = %+v, %v", page, err)
	}
	j := page.Jobs[0]
	if j.Schedule != "every" || !j.Tick.Equal(created.Add(time.Second)) {
		t.Fatalf("the tick's job: schedule %q tick %v", j.Schedule, j.Tick)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Closed for 3.5 s: catch-up all makes ticks 2, 3 and 4 on reopen.
	clock.Advance(3500 * time.Millisecond)
	r = openRunner(t, dir, cfg)
	for range 3 {
		testwait.Recv(t, started, "a missed tick's job")
	}
	page, _ = r.List(ctx, runlog.ListFilter{Schedule: "every", Oldest: true})
	var ticks []string
	for _, j := range page.Jobs {
		ticks = append(ticks, j.Tick.Sub(created).String())
	}
	if strings.Join(ticks, " ") != "1s 2s 3s 4s" {
		t.Fatalf("ticks %v", ticks)
	}
	next, err := r.NextTicks(ctx, "every", 2)
	if err != nil || len(next) != 2 || !next[0].Equal(created.Add(5*time.Second)) || !next[1].Equal(created.Add(6*time.Second)) {
		t.Fatalf("NextTicks = %v, %v", next, err)
	}
	// Paused: the tick passes with no job; resumed: the next one runs.
	if sc, err := r.PauseSchedule(ctx, "every"); err != nil || !sc.Paused {
		t.Fatalf("pause: %+v %v", sc, err)
	}
	clock.Advance(time.Second)
	if sc, err := r.ResumeSchedule(ctx, "every"); err != nil || sc.Paused || !sc.Next.Equal(created.Add(6*time.Second)) {
		t.Fatalf("resume: %+v %v", sc, err)
	}
	clock.waitTimerAt(t, created.Add(6*time.Second), "the loop sleeping until the tick after the pause")
	clock.Advance(time.Second)
	testwait.Recv(t, started, "the tick after resuming")
	page, _ = r.List(ctx, runlog.ListFilter{Schedule: "every"})
	if len(page.Jobs) != 5 || !page.Jobs[0].Tick.Equal(created.Add(6*time.Second)) {
		t.Fatalf("after resume: %d jobs, latest tick %v", len(page.Jobs), page.Jobs[0].Tick.Sub(created))
	}
	if err := r.DeleteSchedule(ctx, "every"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Schedule(ctx, "every"); !errors.Is(err, runlog.ErrScheduleNotFound) {
		t.Fatalf("deleted: %v", err)
	}
}

// TestScheduleRequestsRefused: every bad schedule is refused with
// ErrInvalid and a message that says what to change; nothing is kept.
func TestScheduleRequestsRefused(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: map[string]runlog.Handler{
		"job": runlog.Handle(func(ctx context.Context, s string) error { return nil }),
	}})
	ctx := context.Background()
	job := runlog.JobRequest{Kind: "job"}
	for _, c := range []struct {
		req  runlog.ScheduleRequest
		want string
	}{
		{runlog.ScheduleRequest{Name: "", Every: time.Second, Job: job}, "schedule name"},
		{runlog.ScheduleRequest{Name: "a b", Every: time.Second, Job: job}, "letters, digits"},
		{runlog.ScheduleRequest{Name: strings.Repeat("x", 65), Every: time.Second, Job: job}, "1 to 64"},
		{runlog.ScheduleRequest{Name: "a", Job: job}, "give cron"},
		{runlog.ScheduleRequest{Name: "a", Every: 500 * time.Millisecond, Job: job}, "from 1s"},
		{runlog.ScheduleRequest{Name: "a", Cron: "0 25 * * *", Job: job}, "cron \"0 25 * * *\""},
		{runlog.ScheduleRequest{Name: "a", Cron: "0 3 * * *", TimeZone: "Europe/Pariss", Job: job}, "not a known IANA time zone"},
		{runlog.ScheduleRequest{Name: "a", Every: time.Second, Job: job, Overlap: "never"}, "overlap \"never\""},
		{runlog.ScheduleRequest{Name: "a", Every: time.Second, Job: job, CatchUp: "some"}, "catch_up \"some\""},
		{runlog.ScheduleRequest{Name: "a", Every: time.Second, Job: runlog.JobRequest{Kind: "job", Key: "k"}}, "idempotency key"},
		{runlog.ScheduleRequest{Name: "a", Every: time.Second, Job: runlog.JobRequest{Kind: "job", Delay: time.Second}}, "due at its tick"},
	} {
		_, err := r.CreateSchedule(ctx, c.req)
		if !errors.Is(err, runlog.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CreateSchedule(%+v) = %v, want ErrInvalid saying %q", c.req, err, c.want)
		}
	}
	if _, err := r.CreateSchedule(ctx, runlog.ScheduleRequest{Name: "a", Every: time.Second, Job: runlog.JobRequest{Kind: "nope"}}); !errors.Is(err, runlog.ErrUnknownKind) {
		t.Errorf("unknown kind: %v", err)
	}
	if list, err := r.Schedules(ctx); err != nil || len(list) != 0 {
		t.Fatalf("a refused schedule was kept: %+v %v", list, err)
	}
	if _, err := r.CreateSchedule(ctx, runlog.ScheduleRequest{Name: "a", Cron: "0 3 * * *", TimeZone: "Europe/Paris", Job: job}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CreateSchedule(ctx, runlog.ScheduleRequest{Name: "a", Every: time.Hour, Job: job}); !errors.Is(err, runlog.ErrScheduleExists) {
		t.Fatalf("a repeated name: %v", err)
	}
	for _, err := range []error{
		func() error { _, err := r.PauseSchedule(ctx, "b"); return err }(),
		func() error {
			_, err := r.UpdateSchedule(ctx, runlog.ScheduleRequest{Name: "b", Every: time.Hour, Job: job})
			return err
		}(),
		r.DeleteSchedule(ctx, "b"),
		r.DeleteSchedule(ctx, "../b"),
	} {
		if !errors.Is(err, runlog.ErrScheduleNotFound) {
			t.Errorf("a change of an unknown schedule: %v", err)
		}
	}
}
