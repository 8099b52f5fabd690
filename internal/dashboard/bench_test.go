package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/store/storetest"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
	"github.com/runlog/runlog/runlogtest"
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

// BenchmarkPagesHeld times every page the dashboard serves over a runner
// that holds RUNLOG_BENCH_HELD jobs (default 1 M; issue 16's figure is
// 10 M) in mixed states: storetest.FillHeld through the embedded store's
// API, finished over 23 hours under the default retention (so in as many
// partitions as a store that ran that long holds), nine in ten of them in
// the job table; the runner opens the directory with its clock at the
// fill's end, so that it runs none of the pending jobs. Each page is asked
// for 100 times, with cursors and ids drawn from the jobs held; printed:
// p50 and p99, wall and the CPU time of the serving thread.
func BenchmarkPagesHeld(b *testing.B) {
	n := benchEnv(b, "RUNLOG_BENCH_HELD", 1_000_000, 1000)
	dir := b.TempDir()
	from := runlogtest.Start.UnixMilli()
	to := from + 23*time.Hour.Milliseconds()
	retention := runlog.Retention{Succeeded: 24 * time.Hour, Cancelled: 24 * time.Hour, Failed: 7 * 24 * time.Hour}
	t0 := time.Now()
	s, err := embedded.Open(dir, embedded.Options{State: state.Config{Circuit: retry.DefaultCircuit()}, Now: from,
		Retention: &state.Retention{SucceededMS: retention.Succeeded.Milliseconds(), CancelledMS: retention.Cancelled.Milliseconds(), FailedMS: retention.Failed.Milliseconds()}})
	if err != nil {
		b.Fatal(err)
	}
	held := storetest.FillHeld(b, s, storetest.HeldFill{N: n, From: from, To: to})
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d jobs in %v", n, time.Since(t0).Round(time.Millisecond))
	r, err := runlog.Open(dir, runlog.Config{Handlers: testKinds(), Logger: quietLogger(), Retention: retention,
		Clock: runlogtest.NewClockAt(time.UnixMilli(to))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			b.Errorf("close runner: %v", err)
		}
	})
	h := New(r, Options{Logger: quietLogger()})
	var pending, finished, keyed []storetest.HeldJob
	for _, j := range held {
		if j.State == state.Pending {
			pending = append(pending, j)
		} else {
			finished = append(finished, j)
		}
		if j.Key() != "" {
			keyed = append(keyed, j)
		}
	}
	// pick returns the k-th of a sequence of picks spread over jobs.
	pick := func(jobs []storetest.HeldJob, k int) storetest.HeldJob { return jobs[(k*104729+7)%len(jobs)] }
	id := func(jobs []storetest.HeldJob) func(int) string {
		return func(k int) string { return strconv.FormatUint(pick(jobs, k).ID, 10) }
	}
	anyID := id(held)
	type page struct {
		name string
		path func(k int) string // the path of the k-th request
	}
	at := func(name, path string) page { return page{name, func(int) string { return path }} }
	after := func(name, path string) page {
		return page{name, func(k int) string { return path + "after=" + anyID(k) }}
	}
	pages := []page{
		at("overview", "/"),
		at("jobs", "/jobs"),
		after("jobs after", "/jobs?"),
		page{"jobs before", func(k int) string { return "/jobs?before=" + anyID(k) }},
		at("jobs oldest", "/jobs?order=oldest"),
		after("jobs oldest after", "/jobs?order=oldest&"),
		at("jobs kind", "/jobs?kind=k2"),
		after("jobs kind after", "/jobs?kind=k2&"),
		after("jobs kind oldest after", "/jobs?kind=k2&order=oldest&"),
		at("jobs target", "/jobs?target=t3"),
		after("jobs target after", "/jobs?target=t3&"),
		at("jobs target done", "/jobs?target=t-done"),
		after("jobs target done after", "/jobs?target=t-done&"),
		at("jobs failed kind", "/jobs?state=failed&kind=k1"),
		at("jobs search prefix", "/jobs?q=key-12"),
		after("jobs search prefix after", "/jobs?q=key-12&"),
		page{"jobs search key", func(k int) string { return "/jobs?q=" + pick(keyed, k).Key() }},
		page{"jobs search id", func(k int) string { return "/jobs?q=" + id(finished)(k) }},
		page{"job finished", func(k int) string { return "/jobs/" + id(finished)(k) }},
		page{"job pending", func(k int) string { return "/jobs/" + id(pending)(k) }},
		page{"job deferrals", func(k int) string { return "/jobs/" + id(finished)(k) + "/deferrals" }},
		at("failed", "/failed"),
		at("failed kind", "/failed?kind=k1"),
		after("failed after", "/failed?"),
		at("targets", "/targets"),
		at("queues", "/queues"),
		at("schedules", "/schedules"),
	}
	for _, st := range []string{"pending", "succeeded", "failed", "cancelled"} {
		pages = append(pages,
			at("jobs "+st, "/jobs?state="+st),
			after("jobs "+st+" after", "/jobs?state="+st+"&"),
			at("jobs "+st+" oldest", "/jobs?state="+st+"&order=oldest"),
			after("jobs "+st+" oldest after", "/jobs?state="+st+"&order=oldest&"))
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for range b.N {
		var worst time.Duration
		for _, pg := range pages {
			var t storetest.Timings
			for k := range 100 {
				path := pg.path(k)
				req := httptest.NewRequest(http.MethodGet, path, nil)
				w := httptest.NewRecorder()
				t.Time(func() { h.ServeHTTP(w, req) })
				if w.Code != http.StatusOK {
					b.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
				}
			}
			worst = max(worst, t.P99())
			// Printed, not logged: a benchmark's log is cut at 10 lines.
			fmt.Printf("%-30s %v\n", pg.name, &t)
		}
		b.ReportMetric(float64(worst.Microseconds())/1000, "worst-p99-ms")
	}
}
