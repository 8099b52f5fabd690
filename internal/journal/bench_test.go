package journal

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// benchDir is where benchmarks write: the same disk the tests use, or
// RUNLOG_BENCH_DIR.
func benchDir(b *testing.B) string {
	if d := os.Getenv("RUNLOG_BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "journal-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return b.TempDir()
}

func reportRate(b *testing.B, records int) {
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRawFdatasync is the raw limit: a 64-byte write and an fdatasync
// per iteration on the benchmark disk, appending to a growing file.
func BenchmarkRawFdatasync(b *testing.B) { rawFdatasync(b, false) }

// BenchmarkRawFdatasyncPreallocated is the same loop over a file zero-filled
// in advance, as the journal's segments are: no metadata to flush.
func BenchmarkRawFdatasyncPreallocated(b *testing.B) { rawFdatasync(b, true) }

func rawFdatasync(b *testing.B, prealloc bool) {
	f, err := os.Create(filepath.Join(benchDir(b), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if prealloc {
		if _, err := f.Write(make([]byte, 64<<20)); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
	rec := make([]byte, 64)
	off := int64(0)
	for b.Loop() {
		if _, err := f.WriteAt(rec, off); err != nil {
			b.Fatal(err)
		}
		off = (off + 64) % (64 << 20)
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

func openBench(b *testing.B, opts Options) *Journal {
	j, err := Open(benchDir(b), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { j.Close() })
	return j
}

// BenchmarkAppendSingle is one appender: one record per fdatasync.
func BenchmarkAppendSingle(b *testing.B) {
	j := openBench(b, Options{})
	rec := make([]byte, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Append(rec); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N)
}

// BenchmarkAppendConcurrent64 is 64 goroutines appending 64-byte records:
// group commit shares each fdatasync among them.
func BenchmarkAppendConcurrent64(b *testing.B) {
	syncs := 0 // written by the commit goroutine, read after Close
	var syncTime time.Duration
	j := openBench(b, Options{OnSync: func(s SyncInfo) { syncs++; syncTime += s.Duration }})
	const workers = 64
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + workers - 1) / workers
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := make([]byte, 64)
			for range per {
				if _, err := j.Append(rec); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	j.Close()
	reportRate(b, per*workers)
	b.ReportMetric(float64(per*workers)/float64(max(syncs, 1)), "records/sync")
	b.ReportMetric(float64(syncTime.Microseconds())/float64(max(syncs, 1)), "µs-write+sync/sync")
}

// BenchmarkAppendBatch1000 appends 1,000 64-byte records per call.
func BenchmarkAppendBatch1000(b *testing.B) {
	j := openBench(b, Options{})
	recs := make([][]byte, 1000)
	for i := range recs {
		recs[i] = make([]byte, 64)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.AppendBatch(recs); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N*len(recs))
}
