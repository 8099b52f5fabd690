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
func benchJobs(b *testing.B) int {
	if s := os.Getenv("RUNLOG_BENCH_JOBS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1000 {
			b.Fatalf("RUNLOG_BENCH_JOBS=%q: want a number of jobs, at least 1000", s)
		}
		return n
	}
	return 1_000_000
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
	for i := range 3000 {
		kind := "ok"
		if i%3 == 0 {
			kind = "bad"
		}
		last = bn.enqueue(kind, runlog.Target(fmt.Sprintf("partner-%02d.example", i%100)))
	}
	bn.waitState(last, runlog.StateSucceeded)
	st := testwait.Until(b, fmt.Sprintf("%d pending jobs and none running", n), func() (runlog.Stats, bool) {
		st, err := bn.runner.Stats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return st, st.Running == 0 && st.Pending == n
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
		{"job-pending", "/jobs/1"},
		{"failed", "/failed"},
		{"targets", "/targets"},
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
