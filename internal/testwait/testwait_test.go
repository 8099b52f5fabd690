package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test; Fatalf stops the
// calling goroutine the way testing.T's does.
type fakeT struct {
	testing.TB
	failed atomic.Pointer[string]
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.failed.Store(&msg)
	panic(f)
}

// run calls fn with a fakeT and returns the failure message, if any.
func run(fn func(t testing.TB)) (msg string) {
	f := &fakeT{}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		fn(f)
	}()
	if p := f.failed.Load(); p != nil {
		return *p
	}
	return ""
}

func TestForSeesAnEventFromAnotherGoroutine(t *testing.T) {
	t.Parallel()
	var done atomic.Bool
	go func() { time.Sleep(5 * time.Millisecond); done.Store(true) }() // the event, later
	For(t, "the flag", done.Load)
}

func TestUntilReturnsTheValue(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	got := Until(t, "n to reach 3", func() (int32, bool) { v := n.Add(1); return v, v >= 3 })
	if got != 3 {
		t.Fatalf("Until returned %d; want 3", got)
	}
}

func TestUntilWithinNamesWhatAndTheLastValue(t *testing.T) {
	t.Parallel()
	msg := run(func(t testing.TB) {
		UntilWithin(t, 20*time.Millisecond, "the job to succeed", func() (string, bool) { return "pending", false })
	})
	if !strings.Contains(msg, "the job to succeed") || !strings.Contains(msg, "last seen: pending") {
		t.Fatalf("failure message %q; want it to name what was awaited and the last value", msg)
	}
	msg = run(func(t testing.TB) { ForWithin(t, 10*time.Millisecond, "never", func() bool { return false }) })
	if !strings.Contains(msg, "waiting for never") || strings.Contains(msg, "last seen") {
		t.Fatalf("ForWithin failure message %q", msg)
	}
}

func TestRecv(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	go func() { ch <- 7 }()
	if got := Recv(t, ch, "a value"); got != 7 {
		t.Fatalf("Recv = %d; want 7", got)
	}
	close(ch)
	if msg := run(func(t testing.TB) { Recv(t, ch, "a value") }); !strings.Contains(msg, "closed") {
		t.Fatalf("Recv on a closed channel: %q; want a failure saying it was closed", msg)
	}
}
