// Package testwait is the tests' one way to wait for something that an
// event outside the test makes true (another goroutine, process or node).
//
// A test waits on the event itself when it has one: Recv takes a value
// from a channel, bounded by Timeout. When the only way to see the event is
// to look (a job's state in a store, a file another process writes, a
// server that starts answering), For, ForWithin and Until poll, starting
// at 1 ms and backing off to 10 ms between looks, so that a fast event is
// seen at once and a slow one does not keep a core busy. Every wait is
// bounded: on timeout the test fails, naming what it waited for.
//
// A fixed time.Sleep in a test is for what is itself under test (a slow
// handler, a timeout being exercised, time that must pass on a clock); it
// is never a way to wait for an event.
package testwait

import (
	"testing"
	"time"
)

// Timeout is how long For, Until and Recv wait before failing the test.
const Timeout = 20 * time.Second

// Polling intervals: the first look after firstPoll, then doubling up to
// maxPoll between looks.
const (
	firstPoll = time.Millisecond
	maxPoll   = 10 * time.Millisecond
)

// For checks cond until it holds, and fails t (naming what) if it does not
// within Timeout.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ForWithin(t, Timeout, what, cond)
}

// ForWithin is For with a bound of d instead of Timeout, for waits that are
// slow by nature (a built binary starting under the race detector, a
// cluster of processes catching up).
func ForWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilWithin(t, d, what, func() (struct{}, bool) { return struct{}{}, cond() })
}

// Until calls f until it reports done and returns the value it returned
// then. If f is not done within Timeout it fails t, naming what and the
// last value f returned (so a timed-out wait shows where things stood).
// f may call t.Fatal itself to stop early on a value that can never
// become the one wanted.
func Until[T any](t testing.TB, what string, f func() (T, bool)) T {
	t.Helper()
	return UntilWithin(t, Timeout, what, f)
}

// UntilWithin is Until with a bound of d instead of Timeout.
func UntilWithin[T any](t testing.TB, d time.Duration, what string, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(d)
	pause := firstPoll
	for {
		v, done := f()
		if done {
			return v
		}
		if time.Now().After(deadline) {
			if _, empty := any(v).(struct{}); empty {
				t.Fatalf("timed out after %v waiting for %s", d, what)
			}
			t.Fatalf("timed out after %v waiting for %s; last seen: %+v", d, what, v)
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPoll)
	}
}

// Recv receives one value from ch and returns it. It fails t (naming what)
// if nothing arrives within Timeout, or if ch is closed.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(Timeout)
	defer timer.Stop()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("waiting for %s: the channel was closed", what)
		}
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", Timeout, what)
	}
	panic("unreachable") // t.Fatalf does not return
}
