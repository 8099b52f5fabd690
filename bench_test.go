package runlog_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// payload50 is the benchmarks' 50-byte JSON payload.
var payload50 = []byte(`{"user":12345,"action":"noop","pad":"xxxxxxxxxxx"}`)

// BenchmarkRawFdatasync is the limit the journal works against: a plain loop
// of 64-byte write + fdatasync on the same disk.
func BenchmarkRawFdatasync(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec := make([]byte, 64)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := f.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "syncs/s")
}

// syncCounter counts group commits, for the records-per-sync metric.
type syncCounter struct{ syncs, records, nanos atomic.Int64 }

func (c *syncCounter) AttemptFinished(runlog.AttemptEvent) {}
func (c *syncCounter) JournalSynced(e runlog.SyncEvent) {
	c.syncs.Add(1)
	c.records.Add(int64(e.Records))
	c.nanos.Add(int64(e.Duration))
}

// report adds the records-per-sync metric.
func (c *syncCounter) report(b *testing.B) {
	if s := c.syncs.Load(); s > 0 {
		b.ReportMetric(float64(c.records.Load())/float64(s), "records/sync")
		b.ReportMetric(float64(s), "syncs")
		b.ReportMetric(float64(c.nanos.Load())/float64(s)/1e6, "ms/sync")
	}
}

// benchRunner opens a runner whose "noop" kind counts completions.
func benchRunner(b *testing.B, concurrency int, handler func(ctx context.Context, _ []byte) error) *runlog.Runner {
	return benchRunnerObserved(b, concurrency, nil, handler)
}

// benchRunnerObserved is benchRunner with an observer.
func benchRunnerObserved(b *testing.B, concurrency int, obs runlog.Observer, handler func(ctx context.Context, _ []byte) error) *runlog.Runner {
	b.Helper()
	r, err := runlog.Open(b.TempDir(), runlog.Config{
		Logger:      quietLogger(),
		Observer:    obs,
		Concurrency: concurrency,
		Breaker:     runlog.BreakerConfig{Threshold: 1 << 30, Window: time.Millisecond, Cooldown: time.Second, Probes: 1}, // never trips; a 1 ms window keeps its failure list short
		Handlers:    map[string]runlog.Handler{"noop": runlog.Handle(handler)},
	})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkW1 enqueues 100 k no-op jobs (50-byte payload) with batch
// enqueue, then processes them at concurrency 256, durability on. The jobs
// are enqueued due one hour ahead of a fake clock, so that enqueueing is
// measured alone; the runner is then reopened on the real clock, hours
// later, and processing is timed from Open to the last completion.
func BenchmarkW1(b *testing.B) {
	const n = 100_000
	for range b.N {
		dir := b.TempDir()
		clock := newFakeClock()
		cfg := runlog.Config{Logger: quietLogger(), Concurrency: 256, Clock: clock, Handlers: map[string]runlog.Handler{"noop": runlog.Handle(noop)}}
		r, err := runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50, RunAt: clock.Now().Add(time.Hour)}
		}
		start := time.Now()
		for range n / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		enq := time.Since(start)
		r.Close(context.Background())

		var done atomic.Int64
		all := make(chan struct{})
		var first atomic.Int64
		cfg.Handlers = map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, []byte) error {
			if d := done.Add(1); d == 1 {
				first.Store(time.Now().UnixNano())
			} else if d == n {
				close(all)
			}
			return nil
		})}
		cfg.Clock = nil
		var sc syncCounter
		cfg.Observer = &sc
		start = time.Now()
		if r, err = runlog.Open(dir, cfg); err != nil {
			b.Fatal(err)
		}
		opened := time.Since(start)
		<-all
		proc := time.Since(start)
		b.ReportMetric(opened.Seconds(), "open-s")
		b.ReportMetric(float64(n)/time.Since(time.Unix(0, first.Load())).Seconds(), "steady-jobs/s")
		r.Close(context.Background())
		b.ReportMetric(n/enq.Seconds(), "enqueue-jobs/s")
		b.ReportMetric(n/proc.Seconds(), "process-jobs/s")
		sc.report(b)
	}
}

// BenchmarkW2 runs 64 producers enqueueing one job per call while 256
// workers run them, and reports completions per second and the
// enqueue-to-start latency.
func BenchmarkW2(b *testing.B) {
	dur := 10 * time.Second
	if testing.Short() {
		dur = 2 * time.Second
	}
	for range b.N {
		var mu sync.Mutex
		var lat []time.Duration
		var done atomic.Int64
		r := benchRunner(b, 256, func(ctx context.Context, p []byte) error {
			var t0 time.Time
			if err := t0.UnmarshalBinary(p); err == nil {
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
			done.Add(1)
			return nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), dur)
		var wg sync.WaitGroup
		start := time.Now()
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					p, _ := time.Now().MarshalBinary()
					if _, err := r.Enqueue(context.Background(), "noop", p); err != nil && !errors.Is(err, runlog.ErrClosed) {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		el := time.Since(start)
		completed := done.Load()
		cancel()
		r.Close(context.Background())
		mu.Lock()
		slices.Sort(lat)
		b.ReportMetric(float64(completed)/el.Seconds(), "completed-jobs/s")
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		}
		mu.Unlock()
	}
}

// BenchmarkW3 runs 20 k jobs that fail twice then succeed, backoff base 1ms,
// concurrency 256.
func BenchmarkW3(b *testing.B) {
	const n = 20_000
	for range b.N {
		var done atomic.Int64
		all := make(chan struct{})
		var sc syncCounter
		r := benchRunnerObserved(b, 256, &sc, func(ctx context.Context, _ []byte) error {
			info, _ := runlog.AttemptFrom(ctx)
			if info.Attempt < 3 {
				return errors.New("not yet")
			}
			if done.Add(1) == n {
				close(all)
			}
			return nil
		})
		policy := &runlog.RetryPolicy{Attempts: 5, Base: time.Millisecond, Cap: 4 * time.Millisecond}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50, Retry: policy}
		}
		start := time.Now()
		for range n / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		<-all
		el := time.Since(start)
		r.Close(context.Background())
		b.ReportMetric(n/el.Seconds(), "jobs/s")
		sc.report(b)
	}
}

// procStatusMiB reads a memory line (e.g. VmRSS, VmHWM) of /proc/self/status.
func procStatusMiB(b *testing.B, field string) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return float64(kib) / 1024
		}
	}
	return 0
}

// BenchmarkPending1M holds 1 M pending jobs (50-byte payloads) and reports
// the heap in use and the time to reopen (replay) the journal.
func BenchmarkPending1M(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		dir := b.TempDir()
		cfg := runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{"noop": runlog.Handle(noop)}}
		r, err := runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50, RunAt: time.Now().Add(24 * time.Hour)}
		}
		for range n / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		r.Close(context.Background())
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		r, err = runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reopen := time.Since(start)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(reopen.Seconds(), "reopen-s")
		b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-MiB")
		b.ReportMetric(procStatusMiB(b, "VmRSS"), "rss-MiB")
		b.ReportMetric(procStatusMiB(b, "VmHWM"), "peak-rss-MiB")
		b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/n, "bytes/job")
		r.Close(context.Background())
	}
}

// BenchmarkTargetBacklog drains a backlog of RUNLOG_BENCH_BACKLOG no-op
// jobs (default 8 000), all due, of one target with TargetConcurrency 4,
// at concurrency 256: the claim holds the target's backlog back at every
// claim, so this measures what a held target costs (it grew with the
// square of the backlog while each claim walked every held job again).
func BenchmarkTargetBacklog(b *testing.B) {
	n := envInt("RUNLOG_BENCH_BACKLOG", 8000)
	for range b.N {
		noopCount, all := countdown(n)
		r, err := runlog.Open(b.TempDir(), runlog.Config{
			Logger: quietLogger(), Concurrency: 256, TargetConcurrency: 4,
			Handlers: map[string]runlog.Handler{"noop": noopCount},
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := r.PauseQueue(ctx, "default"); err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, n)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Target: "https://slow.example", Payload: payload50}
		}
		if _, err := r.EnqueueMany(ctx, reqs); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := r.ResumeQueue(ctx, "default"); err != nil {
			b.Fatal(err)
		}
		<-all
		b.ReportMetric(float64(n)/time.Since(start).Seconds(), "jobs/s")
		r.Close(context.Background())
	}
}

// countdown returns a no-op handler and a channel closed when the
// handler has run n times.
func countdown(n int) (runlog.Handler, <-chan struct{}) {
	var done atomic.Int64
	all := make(chan struct{})
	return runlog.Handle(func(context.Context, []byte) error {
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	}), all
}
