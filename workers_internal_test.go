package runlog

import (
	"sync"
	"testing"
	"time"
)

// TestWorkerCountWait checks that wait returns once every counted attempt
// is done, also when attempts start while it waits (a finisher's claim in
// flight when Close began), which a sync.WaitGroup forbids; run it with
// -race.
func TestWorkerCountWait(t *testing.T) {
	t.Parallel()
	var w workerCount
	w.wait() // nothing runs: returns at once
	for range 100 {
		var w workerCount
		w.add()
		var starters sync.WaitGroup
		for range 4 {
			starters.Add(1)
			go func() {
				defer starters.Done()
				w.add()
				time.Sleep(time.Microsecond) // under test: an attempt that runs a moment
				w.done()
			}()
		}
		returned := make(chan struct{})
		go func() { w.wait(); close(returned) }()
		select {
		case <-returned:
			t.Fatal("wait returned while an attempt was counted")
		case <-time.After(time.Millisecond):
		}
		w.done()
		starters.Wait()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("wait did not return after every attempt was done")
		}
	}
}
