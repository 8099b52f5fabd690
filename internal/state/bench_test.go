package state

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/runlog/runlog/retry"
)

const benchJobs = 1_000_000

var benchTargets = func() []string {
	t := make([]string, 100)
	for i := range t {
		t[i] = fmt.Sprintf("https://partner-%d.example.com:443", i)
	}
	return t
}()

// benchEnqueue returns the enqueue of job id with its own 50-byte payload,
// as Decode would produce it.
func benchEnqueue(id uint64, at int64) Op {
	payload := make([]byte, 50)
	payload[0] = byte(id)
	return Op{Kind: OpEnqueue, ID: id, At: at, Due: at, Spec: &Spec{
		Kind: "webhook", Target: benchTargets[id%uint64(len(benchTargets))], Payload: payload,
		Policy: retry.DefaultPolicy(),
	}}
}

// BenchmarkApplyLifecycle applies enqueue, start and succeed for each of
// 1 M jobs, one job after the other (the live engine's steady state).
func BenchmarkApplyLifecycle(b *testing.B) {
	b.ReportAllocs()
	cpu0 := cpuSeconds()
	for b.Loop() {
		s := New(Config{Circuit: retry.DefaultCircuit()})
		for i := range benchJobs {
			id, at := uint64(i+1), int64(1_700_000_000_000+i)
			enq := benchEnqueue(id, at)
			s.Apply(&enq)
			start := Op{Kind: OpStart, ID: id, At: at, Attempt: 1}
			s.Apply(&start)
			done := Op{Kind: OpSucceed, ID: id, At: at + 1, Attempt: 1, Class: retry.Success}
			s.Apply(&done)
		}
		if s.Counts().Succeeded != benchJobs {
			b.Fatalf("counts %+v", s.Counts())
		}
	}
	reportRate(b, cpu0)
}

// BenchmarkApplyBacklog enqueues 1 M jobs first, then takes each from the
// due heap (PeekDue) and applies its start and success: the heap holds a
// million entries.
func BenchmarkApplyBacklog(b *testing.B) {
	b.ReportAllocs()
	cpu0 := cpuSeconds()
	for b.Loop() {
		s := New(Config{Circuit: retry.DefaultCircuit()})
		for i := range benchJobs {
			enq := benchEnqueue(uint64(i+1), int64(1_700_000_000_000+benchJobs-i))
			s.Apply(&enq)
		}
		now := int64(1_700_000_000_000 + benchJobs)
		for j, ok := s.PeekDue(now); ok; j, ok = s.PeekDue(now) {
			start := Op{Kind: OpStart, ID: j.ID, At: now, Attempt: 1}
			s.Apply(&start)
			done := Op{Kind: OpSucceed, ID: j.ID, At: now, Attempt: 1, Class: retry.Success}
			s.Apply(&done)
		}
		if s.Counts().Succeeded != benchJobs {
			b.Fatalf("counts %+v", s.Counts())
		}
	}
	reportRate(b, cpu0)
}

// BenchmarkReplay decodes and applies the journal of 1 M finished jobs
// (three records each), as open does.
func BenchmarkReplay(b *testing.B) {
	var journal [][]byte
	var buf []byte
	for i := range benchJobs {
		id, at := uint64(i+1), int64(1_700_000_000_000+i)
		enq := benchEnqueue(id, at)
		for _, op := range []Op{enq, {Kind: OpStart, ID: id, At: at, Attempt: 1}, {Kind: OpSucceed, ID: id, At: at + 1, Attempt: 1, Class: retry.Success}} {
			start := len(buf)
			buf = Encode(buf, &op)
			journal = append(journal, buf[start:len(buf):len(buf)])
		}
	}
	b.ReportAllocs()
	cpu0 := cpuSeconds()
	for b.Loop() {
		s := New(Config{Circuit: retry.DefaultCircuit()})
		for _, rec := range journal {
			op, err := Decode(rec)
			if err != nil {
				b.Fatal(err)
			}
			s.Apply(&op)
		}
		if s.Counts().Succeeded != benchJobs {
			b.Fatalf("counts %+v", s.Counts())
		}
	}
	reportRate(b, cpu0)
}

// reportRate reports jobs per wall-clock second, and jobs per second of
// this process's CPU time: the machine is shared, so the wall-clock rate
// falls when other processes compete for the cores, the CPU rate does not.
func reportRate(b *testing.B, cpu0 float64) {
	jobs := float64(benchJobs) * float64(b.N)
	b.ReportMetric(jobs/b.Elapsed().Seconds(), "jobs/s")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(jobs/cpu, "jobs/cpu-s")
	}
}

// BenchmarkPendingMemory measures the heap held per pending job with a
// 50-byte payload: the HeapAlloc delta over 1 M pending jobs, after GC.
func BenchmarkPendingMemory(b *testing.B) { pendingMemory(b, false) }

// BenchmarkKeyedPendingMemory is BenchmarkPendingMemory with an
// idempotency key of 13 bytes on every job (order-NNNNNNN): what the key
// map and the ordered keys (lookup.go) add.
func BenchmarkKeyedPendingMemory(b *testing.B) { pendingMemory(b, true) }

func pendingMemory(b *testing.B, keyed bool) {
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		s := New(Config{Circuit: retry.DefaultCircuit()})
		for i := range benchJobs {
			enq := benchEnqueue(uint64(i+1), int64(1_700_000_000_000+i%5000))
			if keyed {
				enq.Spec.Key = fmt.Sprintf("order-%07d", i)
			}
			s.Apply(&enq)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapAlloc-before.HeapAlloc) / benchJobs
		b.ReportMetric(per, "B/job")
		b.ReportMetric(per-50, "B/job-beyond-payload")
		runtime.KeepAlive(s)
	}
}
