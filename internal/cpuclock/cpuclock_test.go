package cpuclock

import (
	"runtime"
	"testing"
	"time"
)

// TestPerJob: 200 ms of work on this process shows in its CPU and the
// machine's, per job, in microseconds; no jobs give no figure.
func TestPerJob(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/stat")
	}
	start, ok := Read()
	if !ok {
		t.Fatal("Read could not read /proc/stat or getrusage on Linux")
	}
	x := 0
	for until := time.Now().Add(200 * time.Millisecond); time.Now().Before(until); {
		x++
	}
	end, _ := Read()
	// 200 ms over 100 jobs is 2000 us a job; allow for the machine
	// counters' 10 ms ticks and a busy scheduler.
	machine, process := start.PerJob(end, 100)
	if process < 1000 || machine < 1000 {
		t.Fatalf("after 200 ms of work (%d loops): %.0f us a job in the process, %.0f on the machine, want 1000 or more each", x, process, machine)
	}
	if m, p := start.PerJob(end, 0); m != 0 || p != 0 {
		t.Fatalf("no jobs: %.0f and %.0f us a job, want none", m, p)
	}
}
