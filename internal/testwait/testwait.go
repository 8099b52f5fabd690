// Package testwait is the tests' one way to wait for a condition that an
// event outside the test makes true (another goroutine, process or node).
package testwait

import (
	"testing"
	"time"
)

// Timeout is how long For waits before failing the test.
const Timeout = 20 * time.Second

// For checks cond every 2 ms until it holds, and fails t (naming what)
// if it does not within Timeout.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
