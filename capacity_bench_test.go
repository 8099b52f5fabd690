package runlog_test

import (
	"bufio"
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// The capacity benchmarks (issue 16) measure what memory, disk and open
// time grow with. Each reopens its directory in a child process, so that the
// reopen's peak RSS is its own; run them one at a time, e.g.
//
//	RUNLOG_BENCH_JOBS=10000000 go test -run '^$' -bench BenchmarkCapacityHistory -benchtime 1x .
//	RUNLOG_BENCH_JOBS=1000000 RUNLOG_BENCH_PAYLOAD=4096 go test -run '^$' -bench BenchmarkCapacityBacklog -benchtime 1x .
//
// RUNLOG_BENCH_DIR (an empty directory) keeps the backlog's directory, to
// profile its reopen: RUNLOG_CAPACITY_DIR=that go test -run TestCapacityReopen -cpuprofile ...
//
// RUNLOG_BENCH_PEAKPROF=path writes a heap profile at each new high of the
// resident set and logs what the peak was made of (watchPeak).

// peakRSS returns the process's peak resident set (VmHWM) in MiB.
func peakRSS() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kb) / 1024
		}
	}
	return 0
}

// rssMiB returns the process's resident set now (VmRSS) in MiB.
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.Atoi(f[1])
	return float64(pages*os.Getpagesize()) / (1 << 20)
}

// statusFields returns the named lines of /proc/self/status, joined.
func statusFields(names ...string) string {
	b, _ := os.ReadFile("/proc/self/status")
	var out []string
	for line := range strings.Lines(string(b)) {
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n+":"); ok {
				out = append(out, n+" "+strings.Join(strings.Fields(rest), " "))
			}
		}
	}
	return strings.Join(out, ", ")
}

// watchPeak, with RUNLOG_BENCH_PEAKPROF set to a path, samples the
// resident set every 100 ms until the returned func is called, writes a
// heap profile to that path each time the resident set reaches a new high
// (by 2 MiB or more), and logs at the end where the peak was and what the
// Go runtime held then: what a peak RSS is made of, to find its causes.
// Without the variable it does nothing.
func watchPeak(b *testing.B) (stop func()) {
	path := os.Getenv("RUNLOG_BENCH_PEAKPROF")
	if path == "" {
		return func() {}
	}
	samples := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	quit, done := make(chan struct{}), make(chan struct{})
	start := time.Now()
	var line string
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		high := 0.0
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			rss := rssMiB()
			if rss < high+2 {
				continue
			}
			high = rss
			metrics.Read(samples)
			mib := func(i int) float64 { return float64(samples[i].Value.Uint64()) / (1 << 20) }
			// The runtime's total counts the pages it released to the
			// system, which are not resident.
			goRes := mib(0) - mib(4)
			line = fmt.Sprintf("peak at %.1fs: RSS %.1f MiB (%s), Go runtime %.1f MiB resident (heap objects %.1f, heap goal %.1f, free pages not released %.1f), outside the Go runtime %.1f MiB",
				time.Since(start).Seconds(), rss, statusFields("RssAnon", "RssFile"), goRes, mib(1), mib(2), mib(3), rss-goRes)
			if f, err := os.Create(path); err == nil {
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		b.Log(line)
	}
}

// TestCapacityReopen is the child of the capacity benchmarks: with
// RUNLOG_CAPACITY_DIR set it opens that directory, prints how long Open
// took, the peak RSS and the job counts, and closes it. Without, it does
// nothing.
func TestCapacityReopen(t *testing.T) {
	dir := os.Getenv("RUNLOG_CAPACITY_DIR")
	if dir == "" {
		t.Skip("the child of the capacity benchmarks")
	}
	start := time.Now()
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"noop": runlog.Handle(func(context.Context, []byte) error { return nil })}})
	if err != nil {
		t.Fatal(err)
	}
	open := time.Since(start)
	st, err := r.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The CPU time of the open (every thread, the collector's included):
	// on a shared machine the wall time mostly says how busy it was.
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("reopen-ms %.1f reopen-peak-rss-MiB %.1f jobs %d pending %d reopen-cpu-ms %.1f\n", float64(open.Microseconds())/1000, peakRSS(), st.Pending+st.Running+st.Succeeded+st.Failed+st.Cancelled, st.Pending, float64(cpu.Microseconds())/1000)
	r.Close(context.Background())
}

// reopenChild runs TestCapacityReopen on dir in a child process and reports
// its figures on b.
func reopenChild(b *testing.B, dir string) {
	cmd := exec.Command(os.Args[0], "-test.run", "^TestCapacityReopen$", "-test.count", "1")
	cmd.Env = append(os.Environ(), "RUNLOG_CAPACITY_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("reopen child: %v\n%s", err, out)
	}
	for line := range bytes.Lines(out) {
		f := strings.Fields(string(line))
		if len(f) == 10 && f[0] == "reopen-ms" {
			ms, _ := strconv.ParseFloat(f[1], 64)
			rss, _ := strconv.ParseFloat(f[3], 64)
			cpu, _ := strconv.ParseFloat(f[9], 64)
			b.ReportMetric(ms, "reopen-ms")
			b.ReportMetric(cpu, "reopen-cpu-ms")
			b.ReportMetric(rss, "reopen-peak-RSS-MiB")
			b.Logf("reopened: %s", line)
			return
		}
	}
	b.Fatalf("reopen child printed no figures:\n%s", out)
}

// BenchmarkCapacityHistory runs N no-op jobs (RUNLOG_BENCH_JOBS, default
// 1 M) with a 100-byte payload through a runner at concurrency 256 with the
// default config (default retention keeps them all), and reports the
// throughput, the peak RSS, the heap after the drain, the disk use, and the
// reopen's time and peak RSS.
func BenchmarkCapacityHistory(b *testing.B) {
	n := envInt("RUNLOG_BENCH_JOBS", 1_000_000)
	payload := bytes.Repeat([]byte("x"), 100)
	for range b.N {
		dir := b.TempDir()
		var done atomic.Int64
		all := make(chan struct{})
		r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Concurrency: 256,
			Handlers: map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, []byte) error {
				if done.Add(1) == int64(n) {
					close(all)
				}
				return nil
			})}})
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload}
		}
		stop := watchPeak(b)
		start := time.Now()
		ctx := context.Background()
		for k := 0; k < n; k += len(reqs) {
			// Keep a bounded backlog, as a steady producer would.
			for int64(k)-done.Load() > 200_000 {
				time.Sleep(time.Millisecond)
			}
			if _, err := r.EnqueueMany(ctx, reqs[:min(len(reqs), n-k)]); err != nil {
				b.Fatal(err)
			}
		}
		<-all
		el := time.Since(start)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if err := r.Close(ctx); err != nil {
			b.Fatal(err)
		}
		stop()
		b.ReportMetric(float64(n)/el.Seconds(), "jobs/s")
		b.ReportMetric(peakRSS(), "peak-RSS-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-after-drain-MiB")
		b.ReportMetric(float64(dirSize(b, dir))/(1<<20), "disk-MiB")
		if _, err := os.Stat(filepath.Join(dir, "table")); err == nil {
			b.ReportMetric(float64(dirSize(b, filepath.Join(dir, "table")))/(1<<20), "table-MiB")
		}
		reopenChild(b, dir)
	}
}

// BenchmarkCapacityBacklog enqueues N jobs (RUNLOG_BENCH_JOBS, default
// 1 M) with payloads of RUNLOG_BENCH_PAYLOAD bytes (default 50) due in an
// hour, as a receiver that is down piles them up, closes the runner and
// reports the peak RSS, the time Close took, the disk use, and the
// reopen's time and peak RSS.
func BenchmarkCapacityBacklog(b *testing.B) {
	n := envInt("RUNLOG_BENCH_JOBS", 1_000_000)
	size := envInt("RUNLOG_BENCH_PAYLOAD", 50)
	for range b.N {
		dir := b.TempDir()
		if keep := os.Getenv("RUNLOG_BENCH_DIR"); keep != "" {
			// Kept for a profile of the reopen (TestCapacityReopen).
			dir = keep
		}
		r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), MaxPayload: max(size, 1<<20),
			Handlers: map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, []byte) error { return nil })}})
		if err != nil {
			b.Fatal(err)
		}
		// Random, distinct payloads: nothing compresses them.
		reqs := make([]runlog.JobRequest, 1000)
		due := time.Now().Add(time.Hour)
		for i := range reqs {
			p := make([]byte, size)
			crand.Read(p)
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: p, RunAt: due}
		}
		ctx := context.Background()
		stop := watchPeak(b)
		start := time.Now()
		for k := 0; k < n; k += len(reqs) {
			// Each job its own payload bytes, as each request brings its own.
			batch := slices.Clone(reqs[:min(len(reqs), n-k)])
			for i := range batch {
				batch[i].Payload = bytes.Clone(batch[i].Payload)
			}
			if _, err := r.EnqueueMany(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		enq := time.Since(start)
		if path := os.Getenv("RUNLOG_BENCH_HEAPPROF"); path != "" {
			f, _ := os.Create(path)
			pprof.WriteHeapProfile(f)
			f.Close()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.Logf("heap in use %d MiB, sys %d MiB, peak RSS %.0f MiB", ms.HeapInuse>>20, ms.Sys>>20, peakRSS())
		}
		start = time.Now()
		if err := r.Close(ctx); err != nil {
			b.Fatal(err)
		}
		stop()
		b.ReportMetric(float64(n)/enq.Seconds(), "enqueue-jobs/s")
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "close-ms")
		b.ReportMetric(peakRSS(), "peak-RSS-MiB")
		b.ReportMetric(float64(dirSize(b, dir))/(1<<20), "disk-MiB")
		reopenChild(b, dir)
	}
}
