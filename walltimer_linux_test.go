package runlog

import (
	"context"
	"testing"
	"time"
)

// waitWall waits for the wall timer to fire (or fails the test).
func waitWall(t *testing.T, wt *wallTimer, what string) {
	t.Helper()
	select {
	case <-wt.C():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the wall timer did not fire within 5 s", what)
	}
}

// TestWallTimer: the timerfd timer fires when the wall clock reaches the time
// it is armed for (not before), at once for a time already past, and a new
// arming replaces the old one; close ends its reader.
func TestWallTimer(t *testing.T) {
	wt, err := newWallTimer()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(50 * time.Millisecond)
	if err := wt.arm(at.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	waitWall(t, wt, "armed 50 ms ahead")
	if now := time.Now(); now.UnixMilli() < at.UnixMilli() {
		t.Fatalf("fired %v before the wall time it was armed for", at.Sub(now))
	}

	if err := wt.arm(time.Now().Add(-time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	waitWall(t, wt, "armed for a past time")

	if err := wt.arm(time.Now().Add(time.Hour).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	if err := wt.arm(time.Now().Add(20 * time.Millisecond).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	waitWall(t, wt, "re-armed from 1 h to 20 ms")

	wt.disarm()
	done := make(chan struct{})
	go func() { wt.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the timer's reader")
	}
}

// TestDispatcherUsesWallTimer: with the system clock on Linux a job due
// shortly starts at its wall-clock due time through the timerfd, which the
// dispatcher sets instead of a bounded monotonic timer.
func TestDispatcherUsesWallTimer(t *testing.T) {
	started := make(chan time.Time, 1)
	r, err := Open(t.TempDir(), Config{SegmentSize: 1 << 20, Handlers: map[string]Handler{
		"job": Handle(func(_ context.Context, _ struct{}) error { started <- time.Now(); return nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(t.Context())
	due := time.Now().Add(100 * time.Millisecond)
	if _, err := r.Enqueue(t.Context(), "job", struct{}{}, RunAt(due)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-started:
		if at.UnixMilli() < due.UnixMilli() {
			t.Fatalf("started %v before its due time", due.Sub(at))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a job due in 100 ms did not start within 5 s")
	}
}
