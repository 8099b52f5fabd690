package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// benchJobs is how many pending jobs BenchmarkPages holds: 1 M, or
// RUNLOG_BENCH_JOBS for a quicker look.
func benchJobs(b *testing.B) int { return benchEnv(b, "RUNLOG_BENCH_JOBS", 1_000_000, 1000) }

// benchFinished is how many jobs BenchmarkPages runs to their end (a third
// of them fail): 3 000, or RUNLOG_BENCH_FINISHED, for a mix of states.
func benchFinished(b *testing.B) int { return benchEnv(b, "RUNLOG_BENCH_FINISHED", 3000, 3) }

// benchEnv returns the number the environment variable name holds (at
// least least), or def when it is not set.
func benchEnv(b *testing.B, name string, def, least int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		b.Fatalf("%s=%q: want a number of jobs, at least %d", name, s, least)
	}
	return n
}

// BenchmarkPages renders every page of the dashboard over a runner that
// holds a large journal: 1 M jobs pending a day ahead (enqueued with
// EnqueueMany in batches of 1000, over 100 targets) plus a few thousand
// finished ones (succeeded and failed). The bar is 100 ms per page: read
// ms/page (wall) on an idle machine, cpu-ms/page (the process's CPU time
// per page, the runner being idle) on a shared one. runner-stats is the
// engine's Stats alone.
func BenchmarkPages(b *testing.B) {
	n := benchJobs(b)
	bn := setup(b, Options{})
	ctx := context.Background()
	t0 := time.Now()
	due := time.Now().Add(24 * time.Hour)
	batch := make([]runlog.JobRequest, 1000)
	for i := 0; i < n; i += len(batch) {
		for j := range batch {
			k := i + j
			batch[j] = runlog.JobRequest{Kind: "ok", Payload: []byte(`{"order":42}`), RunAt: due,
				Target: fmt.Sprintf("partner-%02d.example", k%100), Key: fmt.Sprintf("order-%07d", k)}
		}
		if _, err := bn.runner.EnqueueMany(ctx, batch); err != nil {
			b.Fatalf("enqueue batch at %d: %v", i, err)
		}
	}
	var last uint64
	finished := benchFinished(b)
	for i := 0; i < finished; i += len(batch) {
		for j := range batch {
			k := i + j
			batch[j] = runlog.JobRequest{Kind: "ok", Target: fmt.Sprintf("partner-%02d.example", k%100)}
			if k%3 == 0 {
				batch[j].Kind = "bad"
			}
		}
		res, err := bn.runner.EnqueueMany(ctx, batch[:min(len(batch), finished-i)])
		if err != nil {
			b.Fatalf("enqueue batch at %d: %v", i, err)
		}
		last = res[len(res)-1].ID
	}
	st := testwait.UntilWithin(b, time.Hour, fmt.Sprintf("%d pending jobs, %d finished and none running", n, finished), func() (runlog.Stats, bool) {
		st, err := bn.runner.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return st, st.Running == 0 && st.Pending == n && st.Succeeded+st.Failed == finished
	})
	b.Logf("%d jobs held (%d pending, %d succeeded, %d failed), set up in %v", st.Pending+st.Succeeded+st.Failed, st.Pending, st.Succeeded, st.Failed, time.Since(t0).Round(time.Millisecond))
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"jobs", "/jobs"},
		{"jobs-pending", "/jobs?state=pending"},
		{"jobs-succeeded-oldest", "/jobs?state=succeeded&order=oldest"},
		{"jobs-target", "/jobs?target=partner-07.example"},
		{"jobs-kind", "/jobs?kind=bad"},
		{"jobs-search", "/jobs?q=order-0999999"},
		{"job-finished", "/jobs/" + strconv.FormatUint(last, 10)},
		{"job-finished-oldest", "/jobs/" + strconv.FormatUint(uint64(n)+1, 10)},
		{"job-pending", "/jobs/1"},
		{"jobs-failed-tab", "/jobs?state=failed"},
		{"failed", "/failed"},
		{"targets", "/targets"},
		{"schedules", "/schedules"},
	}
	for _, pg := range pages {
		b.Run(pg.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, pg.path, nil)
			cpu0 := cpuSeconds()
			for b.Loop() {
				w := httptest.NewRecorder()
				bn.handler.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d", pg.path, w.Code)
				}
			}
			reportPerPage(b, cpu0)
		})
	}
	b.Run("runner-stats", func(b *testing.B) {
		cpu0 := cpuSeconds()
		for b.Loop() {
			if _, err := bn.runner.Stats(ctx); err != nil {
				b.Fatal(err)
			}
		}
		reportPerPage(b, cpu0)
	})
}

// reportPerPage reports the wall and CPU milliseconds per iteration. On a
// shared machine the wall time includes waiting for a core; the process CPU
// time (the runner being idle) is the cost itself.
func reportPerPage(b *testing.B, cpu0 float64) {
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/page")
	if cpu := cpuSeconds() - cpu0; cpu > 0 {
		b.ReportMetric(cpu*1000/float64(b.N), "cpu-ms/page")
	}
}
