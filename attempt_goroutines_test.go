package runlog

import (
	"bytes"
	"runtime"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// goroutineID returns the id of the calling goroutine, as its stack trace
// names it.
func goroutineID() string {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, _, _ = bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(b)
}

// TestAttemptGoroutines: every function given to run runs once, also many at
// once; one after another they reuse goroutines instead of starting one
// each; after release no goroutine stays, and run still runs what it is
// given.
func TestAttemptGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	var g attemptGoroutines

	ids := make(map[string]bool)
	const sequential = 100
	for range sequential {
		done := make(chan string)
		g.run(func() { done <- goroutineID() })
		ids[<-done] = true
	}
	if len(ids) == sequential {
		t.Errorf("%d attempts one after another ran on %d goroutines: none was reused", sequential, len(ids))
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := make(map[int]int)
	for i := range 200 {
		wg.Add(1)
		g.run(func() {
			defer wg.Done()
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range 200 {
		if ran[i] != 1 {
			t.Errorf("function %d ran %d times, want 1", i, ran[i])
		}
	}

	g.release()
	g.release() // idempotent
	done := make(chan struct{})
	g.run(func() { close(done) })
	<-done
}
