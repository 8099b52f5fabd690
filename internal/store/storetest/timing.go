package storetest

import (
	"fmt"
	"slices"
	"time"
)

// Timings are the wall and thread CPU times of calls a benchmark timed
// (Time), for their p50 and p99. Call Time with the goroutine locked to
// its thread (runtime.LockOSThread): on a shared machine the wall time's
// tail is mostly the waits for a core, the thread's CPU time is the cost.
type Timings struct{ Wall, CPU []time.Duration }

// Time calls fn and records its wall and CPU time.
func (t *Timings) Time(fn func()) {
	t0, c0 := time.Now(), ThreadCPU()
	fn()
	t.Wall, t.CPU = append(t.Wall, time.Since(t0)), append(t.CPU, ThreadCPU()-c0)
}

// P99 is the p99 wall time.
func (t *Timings) P99() time.Duration {
	_, p99 := Percentiles(t.Wall)
	return p99
}

// String gives the p50 and p99, wall and CPU: "p50 1ms p99 2ms (CPU p50
// 0.9ms p99 1.2ms)".
func (t *Timings) String() string {
	w50, w99 := Percentiles(t.Wall)
	c50, c99 := Percentiles(t.CPU)
	return fmt.Sprintf("p50 %v p99 %v (CPU p50 %v p99 %v)", w50, w99, c50, c99)
}

// Percentiles returns the p50 and p99 of d (sorting a copy).
func Percentiles(d []time.Duration) (p50, p99 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	d = slices.Sorted(slices.Values(d))
	return d[len(d)/2], d[len(d)*99/100]
}
