package runlog_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/internal/vfs"
)

// fullDiskSeg is the segment size of the full-disk tests.
const fullDiskSeg = 256 << 10

// openOnMem opens a runner whose journal lives in /data on m, with a noop
// handler.
func openOnMem(t *testing.T, m *vfs.Mem) *runlog.Runner {
	t.Helper()
	return openOnMemWith(t, m, runlog.Config{
		Logger:      quietLogger(),
		SegmentSize: fullDiskSeg,
		Handlers:    map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, string) error { return nil })},
	})
}

// openOnMemWith opens a runner under cfg whose journal lives in /data on m.
func openOnMemWith(t *testing.T, m *vfs.Mem, cfg runlog.Config) *runlog.Runner {
	t.Helper()
	r, err := runlog.OpenFS("/data", cfg, m)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

// later is a due time no test reaches: the jobs stay pending, so only
// enqueues write to the journal.
var later = runlog.RunAt(time.Now().Add(24 * time.Hour))

// TestFullDiskRunner (issue 14 items 8 and 9): a disk with room for the
// active segment and half of another. The runner must fill the active
// segment and go on in one that is not preallocated, report the failure
// with Err once a write finds no room, and keep every acknowledged job
// after space is freed and it is opened again.
func TestFullDiskRunner(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	m.SetCapacity(fullDiskSeg + fullDiskSeg/2)
	r := openOnMem(t, m)
	ctx := context.Background()
	body := strings.Repeat("x", 1000)
	var acked []uint64
	var failure error
	for len(acked) < 10000 {
		id, err := r.Enqueue(ctx, "noop", body, later)
		if err != nil {
			failure = err
			break
		}
		acked = append(acked, id)
		if len(acked)%50 == 0 && r.Err() != nil {
			t.Fatalf("Err() = %v with the journal still taking jobs", r.Err())
		}
	}
	if failure == nil {
		t.Fatal("the disk never filled")
	}
	// About 1 KiB a job: the active segment and most of the half segment
	// left must have been used, not just the active one.
	if min := (fullDiskSeg + fullDiskSeg/3) / 1100; len(acked) < min {
		t.Fatalf("the journal failed after %d jobs (%v); want at least %d: the space beside the active segment was not used", len(acked), failure, min)
	}
	err := r.Err()
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Err() after the journal failed = %v; want the failure (ENOSPC)", err)
	}
	_ = r.Close(ctx)
	m.SetCapacity(0) // the operator frees space
	r = openOnMem(t, m)
	defer r.Close(ctx)
	if err := r.Err(); err != nil {
		t.Fatalf("Err() after reopening = %v", err)
	}
	for _, id := range acked {
		if _, err := r.Job(ctx, id); err != nil {
			t.Fatalf("acknowledged job %d lost: %v", id, err)
		}
	}
}

// TestFullDiskCleanStop (issue 14 item 9): Close must not need a new
// preallocated segment. With no room at all beside the active segment it
// skips the final snapshot and succeeds; with some room, less than a
// segment, it writes the snapshot.
func TestFullDiskCleanStop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		room     int64 // free bytes at Close
		snapshot bool  // one is written
	}{
		{"no room", 0, false},
		{"less than a segment", fullDiskSeg / 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := vfs.NewMem()
			r := openOnMem(t, m)
			ctx := context.Background()
			var ids []uint64
			for range 20 {
				id, err := r.Enqueue(ctx, "noop", "payload", later)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			m.SetCapacity(usedBytes(t, m) + tc.room)
			if err := r.Close(ctx); err != nil {
				t.Fatalf("Close with %d bytes free: %v", tc.room, err)
			}
			names, _ := m.List("/data")
			snaps := 0
			for _, n := range names {
				if strings.HasSuffix(n, ".snap") {
					snaps++
				}
				if strings.HasSuffix(n, ".tmp") {
					t.Errorf("temporary file %s left behind", n)
				}
			}
			if (snaps > 0) != tc.snapshot {
				t.Errorf("files %v: snapshot written = %v; want %v", names, snaps > 0, tc.snapshot)
			}
			m.SetCapacity(0)
			r = openOnMem(t, m)
			defer r.Close(ctx)
			for _, id := range ids {
				if _, err := r.Job(ctx, id); err != nil {
					t.Fatalf("job %d lost: %v", id, err)
				}
			}
		})
	}
}

// usedBytes sums the sizes of the files in /data on m.
func usedBytes(t *testing.T, m *vfs.Mem) int64 {
	t.Helper()
	names, err := m.List("/data")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, name := range names {
		fi, err := m.Stat("/data/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// TestFullDiskScheduleTicks: a schedule whose ticks come while the disk is
// full makes no job for them and loses nothing acknowledged; the runner
// reports the failure (Err, ENOSPC). Once space is freed and the runner
// opened again, the missed ticks follow the catch-up rule ("all": one job
// each) and no tick has two jobs.
func TestFullDiskScheduleTicks(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	m.SetCapacity(fullDiskSeg + fullDiskSeg/2)
	clock := newFakeClock()
	cfg := runlog.Config{
		Logger: quietLogger(), SegmentSize: fullDiskSeg, Clock: clock,
		Handlers: map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, string) error { return nil })},
	}
	r := openOnMemWith(t, m, cfg)
	ctx := context.Background()
	created := clock.Now()
	if _, err := r.CreateSchedule(ctx, runlog.ScheduleRequest{Name: "every", Every: time.Second, CatchUp: "all",
		Job: runlog.JobRequest{Kind: "noop", Payload: []byte(`"tick"`)}}); err != nil {
		t.Fatal(err)
	}
	// Fill the disk with jobs that stay pending.
	var acked []uint64
	body := strings.Repeat("x", 1000)
	for {
		id, err := r.Enqueue(ctx, "noop", body, runlog.RunAt(created.Add(24*time.Hour)))
		if err != nil {
			break
		}
		acked = append(acked, id)
		if len(acked) > 10000 {
			t.Fatal("the disk never filled")
		}
	}
	if err := r.Err(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Err() after the journal failed = %v; want ENOSPC", err)
	}
	// Three ticks pass on the full disk: none may make a job.
	clock.Advance(3500 * time.Millisecond)
	_ = r.Close(ctx)

	m.SetCapacity(0) // the operator frees space
	r = openOnMemWith(t, m, cfg)
	defer r.Close(ctx)
	for _, id := range acked {
		if _, err := r.Job(ctx, id); err != nil {
			t.Fatalf("acknowledged job %d lost: %v", id, err)
		}
	}
	var page runlog.Page
	testwait.For(t, "the missed ticks' jobs", func() bool {
		var err error
		page, err = r.List(ctx, runlog.ListFilter{Schedule: "every", Oldest: true})
		return err == nil && len(page.Jobs) >= 3
	})
	var ticks []string
	for _, j := range page.Jobs {
		ticks = append(ticks, j.Tick.Sub(created).String())
	}
	if got := strings.Join(ticks, " "); got != "1s 2s 3s" {
		t.Fatalf("ticks with a job: %s; want each missed tick once: 1s 2s 3s", got)
	}
}

// TestFullDiskDiscardAndEnable: on a full disk, a discard and an enable of
// a disabled target are refused (each is one journaled step that cannot be
// written) and change nothing. Once space is freed and the runner opened
// again, the job is still there and the target still disabled, and both
// steps then succeed.
func TestFullDiskDiscardAndEnable(t *testing.T) {
	t.Parallel()
	m := vfs.NewMem()
	m.SetCapacity(fullDiskSeg + fullDiskSeg/2)
	cfg := runlog.Config{
		Logger: quietLogger(), SegmentSize: fullDiskSeg,
		Handlers: map[string]runlog.Handler{
			"noop": runlog.Handle(func(context.Context, string) error { return nil }),
			"gone": runlog.Handle(func(context.Context, string) error { return runlog.Gone(errors.New("410 Gone")) }),
		},
	}
	r := openOnMemWith(t, m, cfg)
	ctx := context.Background()
	done, err := r.Enqueue(ctx, "noop", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Enqueue(ctx, "gone", "x", runlog.Target("partner")); err != nil {
		t.Fatal(err)
	}
	disabled := func(r *runlog.Runner) bool {
		ts, err := r.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ts := range ts {
			if ts.Target == "partner" {
				return ts.Disabled
			}
		}
		return false
	}
	testwait.For(t, "the job succeeded and the target disabled", func() bool {
		j, err := r.Job(ctx, done)
		return err == nil && j.State == runlog.StateSucceeded && disabled(r)
	})
	body := strings.Repeat("x", 1000)
	for n := 0; ; n++ {
		if _, err := r.Enqueue(ctx, "noop", body, later); err != nil {
			break
		}
		if n > 10000 {
			t.Fatal("the disk never filled")
		}
	}
	if err := r.Err(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Err() after the journal failed = %v; want ENOSPC", err)
	}
	if err := r.Discard(ctx, done); err == nil {
		t.Fatal("Discard succeeded on a full disk")
	}
	if _, err := r.EnableTarget(ctx, "partner"); err == nil {
		t.Fatal("EnableTarget succeeded on a full disk")
	}
	_ = r.Close(ctx)

	m.SetCapacity(0) // the operator frees space
	r = openOnMemWith(t, m, cfg)
	defer r.Close(ctx)
	if j, err := r.Job(ctx, done); err != nil || j.State != runlog.StateSucceeded {
		t.Fatalf("the job whose discard was refused: %+v, %v; want it kept, succeeded", j, err)
	}
	if !disabled(r) {
		t.Fatal("the target whose enable was refused is no longer disabled")
	}
	if err := r.Discard(ctx, done); err != nil {
		t.Fatalf("Discard after space was freed: %v", err)
	}
	if _, err := r.Job(ctx, done); !errors.Is(err, runlog.ErrNotFound) {
		t.Fatalf("Job after its discard: %v; want ErrNotFound", err)
	}
	if _, err := r.EnableTarget(ctx, "partner"); err != nil {
		t.Fatalf("EnableTarget after space was freed: %v", err)
	}
}
