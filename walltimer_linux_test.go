package runlog

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/testwait"
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
	t.Parallel()
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

// armedWallTimers returns the remaining time of every timerfd of this
// process on CLOCK_REALTIME armed with TFD_TIMER_ABSTIME and
// TFD_TIMER_CANCEL_ON_SET, as the kernel shows them in /proc/self/fdinfo.
func armedWallTimers(t *testing.T) []time.Duration {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	var out []time.Duration
	for _, e := range entries {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link != "anon_inode:[timerfd]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		var clockID, flags int
		var sec, nsec int64
		for line := range strings.Lines(string(info)) {
			fmt.Sscanf(line, "clockid: %d", &clockID)
			fmt.Sscanf(line, "settime flags: %o", &flags)
			fmt.Sscanf(line, "it_value: (%d, %d)", &sec, &nsec)
		}
		if clockID == 0 && flags == 3 && sec+nsec > 0 {
			out = append(out, time.Duration(sec)*time.Second+time.Duration(nsec))
		}
	}
	return out
}

// TestDispatcherUsesWallTimer: with the system clock on Linux the dispatcher
// waits for a job due in 1 h on a timerfd on the wall clock, armed for the
// job's due time with TFD_TIMER_ABSTIME|TFD_TIMER_CANCEL_ON_SET (so that a
// clock step wakes it, which a test cannot cause without stepping the
// machine's clock), and a job due shortly starts at its due time, not
// before.
func TestDispatcherUsesWallTimer(t *testing.T) {
	started := make(chan time.Time, 1)
	r, err := Open(t.TempDir(), Config{SegmentSize: 1 << 20, Handlers: map[string]Handler{
		"job": Handle(func(_ context.Context, _ struct{}) error { started <- time.Now(); return nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())

	if _, err := r.Enqueue(t.Context(), "job", struct{}{}, RunAt(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	// The dispatcher arms the timer on its own goroutine.
	testwait.UntilWithin(t, 10*time.Second, "one wall-clock timer armed about 1 h from now", func() ([]time.Duration, bool) {
		armed := armedWallTimers(t)
		return armed, len(armed) == 1 && armed[0] > 59*time.Minute && armed[0] <= time.Hour
	})

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
