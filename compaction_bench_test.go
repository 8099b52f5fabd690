package runlog_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// dirSize sums the sizes of the files in dir.
func dirSize(tb testing.TB, dir string) int64 {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// envInt reads a benchmark size from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// byteCounter sums the bytes the journal synced: the journal's size without
// compaction.
type byteCounter struct{ bytes atomic.Int64 }

func (c *byteCounter) AttemptFinished(runlog.AttemptEvent) {}
func (c *byteCounter) JournalSynced(e runlog.SyncEvent)    { c.bytes.Add(int64(e.Bytes)) }

// BenchmarkCompaction runs N no-op jobs (RUNLOG_BENCH_JOBS, default 1 M)
// through a runner with default settings, then reports the disk use of the
// directory next to the bytes the journal wrote (what it would hold without
// snapshots and compaction), and the newest snapshot's size.
func BenchmarkCompaction(b *testing.B) {
	n := envInt("RUNLOG_BENCH_JOBS", 1_000_000)
	for range b.N {
		dir := b.TempDir()
		var bc byteCounter
		noopCount, all := countdown(n)
		r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Concurrency: 256, Observer: &bc,
			Handlers: map[string]runlog.Handler{"noop": noopCount}})
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50}
		}
		start := time.Now()
		for range n / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		<-all
		el := time.Since(start)
		before := dirSize(b, dir)
		r.Close(context.Background())
		after := dirSize(b, dir)
		var snap int64
		snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.snap"))
		if len(snaps) > 0 {
			slices.Sort(snaps)
			fi, _ := os.Stat(snaps[len(snaps)-1])
			snap = fi.Size()
		}
		b.ReportMetric(float64(n)/el.Seconds(), "jobs/s")
		b.ReportMetric(float64(bc.bytes.Load())/(1<<20), "journal-written-MiB")
		b.ReportMetric(float64(before)/(1<<20), "disk-before-close-MiB")
		b.ReportMetric(float64(after)/(1<<20), "disk-after-close-MiB")
		b.ReportMetric(float64(snap)/(1<<20), "snapshot-MiB")
	}
}

// BenchmarkReopen100kLive holds 100 k pending jobs after a long history
// (RUNLOG_BENCH_HISTORY finished jobs, default 400 k) and reports how long
// Open takes after a clean Close (snapshot) and after a crash-like close
// (snapshot of the past plus the journal since).
func BenchmarkReopen100kLive(b *testing.B) {
	history := envInt("RUNLOG_BENCH_HISTORY", 400_000)
	const live = 100_000
	for range b.N {
		dir := b.TempDir()
		var done atomic.Int64
		all := make(chan struct{})
		cfg := runlog.Config{Logger: quietLogger(), Concurrency: 256, Handlers: map[string]runlog.Handler{"noop": runlog.Handle(func(context.Context, []byte) error {
			if done.Add(1) == int64(history) {
				close(all)
			}
			return nil
		})}}
		r, err := runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50}
		}
		for range history / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		<-all
		for i := range reqs {
			reqs[i].RunAt = time.Now().Add(24 * time.Hour)
		}
		for range live / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		r.Close(context.Background())
		start := time.Now()
		r, err = runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "reopen-s")
		st, _ := r.Stats(context.Background())
		if st.Pending != live {
			b.Fatalf("%d pending after reopen, want %d", st.Pending, live)
		}
		r.Close(context.Background())
		b.ReportMetric(float64(dirSize(b, dir))/(1<<20), "disk-MiB")
	}
}

// BenchmarkSnapshotPause holds 1 M live jobs and measures how long single
// enqueues take while the background snapshot of that state is written,
// against the same loop with no snapshot running: the snapshot never takes
// the store's lock, so what shows is the CPU and GC it competes for.
func BenchmarkSnapshotPause(b *testing.B) {
	live := envInt("RUNLOG_BENCH_LIVE", 1_000_000)
	for range b.N {
		dir := b.TempDir()
		cfg := runlog.Config{Logger: quietLogger(), SnapshotBytes: -1, Handlers: map[string]runlog.Handler{"noop": runlog.Handle(noop)}}
		r, err := runlog.Open(dir, cfg)
		if err != nil {
			b.Fatal(err)
		}
		reqs := make([]runlog.JobRequest, 1000)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "noop", Payload: payload50, RunAt: time.Now().Add(24 * time.Hour)}
		}
		for range live / len(reqs) {
			if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
				b.Fatal(err)
			}
		}
		measure := func(d time.Duration) []time.Duration {
			var lat []time.Duration
			end := time.Now().Add(d)
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := r.Enqueue(context.Background(), "noop", payload50, runlog.RunIn(24*time.Hour)); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			return lat
		}
		base := measure(2 * time.Second)
		snapDone := make(chan time.Duration)
		go func() {
			t0 := time.Now()
			if err := r.Snapshot(context.Background()); err != nil {
				b.Error(err)
			}
			snapDone <- time.Since(t0)
		}()
		var during []time.Duration
		var snapTook time.Duration
	loop:
		for {
			select {
			case snapTook = <-snapDone:
				break loop
			default:
			}
			during = append(during, measure(100*time.Millisecond)...)
		}
		slices.Sort(during)
		r.Close(context.Background())
		pct := func(l []time.Duration, p int) float64 { return float64(l[len(l)*p/100].Microseconds()) / 1000 }
		b.ReportMetric(snapTook.Seconds(), "snapshot-s")
		b.ReportMetric(pct(base, 99), "base-p99-ms")
		b.ReportMetric(float64(base[len(base)-1].Microseconds())/1000, "base-max-ms")
		b.ReportMetric(pct(during, 99), "during-p99-ms")
		b.ReportMetric(float64(during[len(during)-1].Microseconds())/1000, "during-max-ms")
	}
}
