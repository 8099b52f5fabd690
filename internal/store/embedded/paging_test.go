package embedded

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// held is what the paging test and benchmark know of each job they made.
type held struct {
	state, kind, target, key string
}

// fillStore makes n jobs in mixed states through the store: kinds k0-k4,
// targets t0-t6, a key on every tenth; most finish (succeeded, failed,
// cancelled), the rest stay pending; the spiller moves the finished ones
// to the table except the last batch's. It returns the model.
func fillStore(tb testing.TB, s *Store, n int) map[uint64]held {
	tb.Helper()
	ctx := context.Background()
	model := make(map[uint64]held, n)
	now := int64(1_700_000_000_000)
	const batch = 5000
	for done := 0; done < n; done += batch {
		m := min(batch, n-done)
		jobs := make([]store.NewJob, m)
		for i := range jobs {
			k := done + i
			sp := state.Spec{Kind: "k" + strconv.Itoa(k%5), Target: "t" + strconv.Itoa(k%7), Payload: []byte("p"), Policy: retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}}
			if k%10 == 0 {
				sp.Key = "key-" + strconv.Itoa(k)
			}
			jobs[i] = store.NewJob{Due: now, Spec: sp}
		}
		res, err := s.Enqueue(ctx, now, jobs)
		if err != nil {
			tb.Fatal(err)
		}
		for i, r := range res {
			model[r.ID] = held{state: "pending", kind: jobs[i].Spec.Kind, target: jobs[i].Spec.Target, key: jobs[i].Spec.Key}
		}
		cs, err := s.Claim(ctx, now, store.Limits{Max: m * 9 / 10})
		if err != nil {
			tb.Fatal(err)
		}
		outs := make([]store.Outcome, 0, len(cs))
		for i, c := range cs {
			class, st := retry.Success, "succeeded"
			if i%4 == 1 {
				class, st = retry.Permanent, "failed"
			}
			outs = append(outs, store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: class, AfterMS: -1, Error: "x"})
			h := model[c.ID]
			h.state = st
			model[c.ID] = h
		}
		if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
			tb.Fatal(err)
		}
		for i := 0; i < len(res); i += 37 {
			if h := model[res[i].ID]; h.state == "pending" {
				if _, err := s.Cancel(ctx, now, res[i].ID, "c"); err != nil {
					tb.Fatal(err)
				}
				h.state = "cancelled"
				model[res[i].ID] = h
			}
		}
		if done+batch < n {
			if err := s.settle(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return model
}

// pagingFilter is a filter with its test on what the model holds.
type pagingFilter struct {
	f     store.Filter
	match func(held) bool
}

// pagingFilters are the filters the paging test walks, each with its test.
func pagingFilters() []pagingFilter {
	return []pagingFilter{
		{store.Filter{}, func(held) bool { return true }},
		{store.Filter{State: "pending"}, func(h held) bool { return h.state == "pending" }},
		{store.Filter{State: "succeeded"}, func(h held) bool { return h.state == "succeeded" }},
		{store.Filter{State: "failed"}, func(h held) bool { return h.state == "failed" }},
		{store.Filter{State: "cancelled"}, func(h held) bool { return h.state == "cancelled" }},
		{store.Filter{Kind: "k2"}, func(h held) bool { return h.kind == "k2" }},
		{store.Filter{Target: "t3"}, func(h held) bool { return h.target == "t3" }},
		{store.Filter{State: "failed", Kind: "k1"}, func(h held) bool { return h.state == "failed" && h.kind == "k1" }},
		{store.Filter{State: "succeeded", Target: "t4"}, func(h held) bool { return h.state == "succeeded" && h.target == "t4" }},
		{store.Filter{Kind: "k3", Target: "t5"}, func(h held) bool { return h.kind == "k3" && h.target == "t5" }},
		{store.Filter{Search: "key-12"}, func(h held) bool { return len(h.key) >= 6 && h.key[:6] == "key-12" }},
	}
}

// TestPagingEveryFilter: with jobs in mixed states, in memory and in the
// table, walking every page of every filter in both orders returns every
// match exactly once, in order, with no short or empty page before the
// end. RUNLOG_TEST_PAGING_JOBS sets the number of jobs (default 60 000;
// the figure is 1 M).
func TestPagingEveryFilter(t *testing.T) {
	t.Parallel()
	n := 60_000
	if v, err := strconv.Atoi(os.Getenv("RUNLOG_TEST_PAGING_JOBS")); err == nil && v > 0 {
		n = v
	}
	s, err := Open(t.TempDir(), Options{Journal: journal.Options{NoPreallocate: true}, State: state.Config{Circuit: retry.DefaultCircuit()}, Now: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	model := fillStore(t, s, n)
	ctx := context.Background()
	for _, pf := range pagingFilters() {
		var want []uint64
		for id, h := range model {
			if pf.match(h) {
				want = append(want, id)
			}
		}
		slices.Sort(want)
		for _, oldest := range []bool{true, false} {
			f := pf.f
			f.Oldest, f.Limit = oldest, 500
			var got []uint64
			for pages := 0; ; pages++ {
				page, next, err := s.List(ctx, f)
				if err != nil {
					t.Fatalf("%+v: %v", f, err)
				}
				for _, j := range page {
					got = append(got, j.ID)
				}
				if next == 0 {
					break
				}
				if len(page) != f.Limit {
					t.Fatalf("%+v: page %d has %d jobs before the end", f, pages, len(page))
				}
				f.After = next
			}
			if !oldest {
				slices.Reverse(got)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%+v (oldest %v): %d jobs, want %d (first difference at %d)", pf.f, oldest, len(got), len(want), firstDiff(got, want))
			}
		}
	}
}

func firstDiff(a, b []uint64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// BenchmarkListHeld fills a store with RUNLOG_BENCH_HELD jobs (default
// 1 M; the figure is 10 M) and times, per filter, the first page
// of 50 and pages from random cursors, and Job of random finished jobs,
// reporting p50 and p99.
func BenchmarkListHeld(b *testing.B) {
	s, n := benchStore(b)
	start := time.Now()
	model := fillStore(b, s, n)
	if err := s.settle(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d jobs in %v", n, time.Since(start))
	ids := make([]uint64, 0, len(model))
	var finished []uint64
	for id, h := range model {
		ids = append(ids, id)
		if h.state != "pending" {
			finished = append(finished, id)
		}
	}
	slices.Sort(ids)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		timeFilters(b, s, pagingFilters(), ids)
		var gets []time.Duration
		for k := range 2000 {
			t0 := time.Now()
			if _, err := s.Job(ctx, finished[(k*104729)%len(finished)]); err != nil {
				b.Fatal(err)
			}
			gets = append(gets, time.Since(t0))
		}
		g50, g99 := percentiles(gets)
		b.ReportMetric(float64(g99.Microseconds())/1000, "job-p99-ms")
		b.Logf("Job(id) of a finished job: p50 %v p99 %v", g50, g99)
	}
}

// percentiles returns the p50 and p99 of d, which it sorts.
func percentiles(d []time.Duration) (time.Duration, time.Duration) {
	slices.Sort(d)
	return d[len(d)/2], d[len(d)*99/100]
}

// timeFilters times List, per filter, on the first page of 50 and on pages
// from 200 cursors among ids, and reports and prints the p50 and p99 of
// each, wall and CPU.
func timeFilters(b *testing.B, s *Store, filters []pagingFilter, ids []uint64) {
	ctx := context.Background()
	// The CPU time of each call is measured too (the goroutine locked to
	// its thread): on a shared machine the wall time's tail is mostly the
	// waits for a core.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i, pf := range filters {
		var first, later, firstCPU, laterCPU []time.Duration
		for k := range 400 {
			f := pf.f
			f.Limit = 50
			if k%2 == 1 {
				f.After = ids[(k*7919)%len(ids)]
			}
			t0, c0 := time.Now(), threadCPU()
			if _, _, err := s.List(ctx, f); err != nil {
				b.Fatal(err)
			}
			if f.After == 0 {
				first, firstCPU = append(first, time.Since(t0)), append(firstCPU, threadCPU()-c0)
			} else {
				later, laterCPU = append(later, time.Since(t0)), append(laterCPU, threadCPU()-c0)
			}
		}
		p50, p99 := percentiles(first)
		l50, l99 := percentiles(later)
		c50, cp99 := percentiles(firstCPU)
		cl50, cl99 := percentiles(laterCPU)
		b.ReportMetric(float64(p99.Microseconds())/1000, fmt.Sprintf("f%d-first-p99-ms", i))
		b.ReportMetric(float64(l99.Microseconds())/1000, fmt.Sprintf("f%d-later-p99-ms", i))
		// Printed, not logged: a benchmark's log is cut at 10 lines.
		fmt.Printf("filter %+v: first page p50 %v p99 %v (CPU p50 %v p99 %v); later pages p50 %v p99 %v (CPU p50 %v p99 %v)\n", pf.f, p50, p99, c50, cp99, l50, l99, cl50, cl99)
	}
}

// BenchmarkListBacklog times List over a backlog: RUNLOG_BENCH_HELD
// pending jobs (default 1 M; the figure is 10 M), each with a key
// order-NNNNNNN, of kind common but one in 10 000 of kind sparse, plus
// 3 000 failed jobs of kind rare (in the table): the filters a dashboard
// search and a kind's page ask for, where the matches among the pending
// jobs are none, few or many.
func BenchmarkListBacklog(b *testing.B) {
	s, n := benchStore(b)
	ctx := context.Background()
	now := int64(1_700_000_000_000)
	start := time.Now()
	policy := retry.Policy{Attempts: 1, BaseMS: 1, CapMS: 1}
	var ids []uint64
	const batch = 5000
	for done := 0; done < n; done += batch {
		jobs := make([]store.NewJob, min(batch, n-done))
		for i := range jobs {
			k := done + i
			kind := "common"
			if k%10_000 == 0 {
				kind = "sparse"
			}
			jobs[i] = store.NewJob{Due: now + 3_600_000, Spec: state.Spec{Kind: kind, Target: "t" + strconv.Itoa(k%100), Key: fmt.Sprintf("order-%07d", k), Payload: []byte("p"), Policy: policy}}
		}
		res, err := s.Enqueue(ctx, now, jobs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	rare := make([]store.NewJob, 3000)
	for i := range rare {
		rare[i] = store.NewJob{Due: now, Spec: state.Spec{Kind: "rare", Target: "t", Payload: []byte("p"), Policy: policy}}
	}
	if _, err := s.Enqueue(ctx, now, rare); err != nil {
		b.Fatal(err)
	}
	cs, err := s.Claim(ctx, now, store.Limits{Max: len(rare)})
	if err != nil {
		b.Fatal(err)
	}
	outs := make([]store.Outcome, len(cs))
	for i, c := range cs {
		outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Permanent, AfterMS: -1, Error: "x"}
		ids = append(ids, c.ID)
	}
	if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
		b.Fatal(err)
	}
	if err := s.settle(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d pending and %d failed jobs in %v", n, len(cs), time.Since(start))
	filters := []pagingFilter{
		{f: store.Filter{Kind: "rare"}}, {f: store.Filter{Kind: "sparse"}}, {f: store.Filter{Kind: "common"}},
		{f: store.Filter{Search: fmt.Sprintf("order-%07d", n-1)}}, {f: store.Filter{Search: "order-00001"}},
		{f: store.Filter{Search: "order-0"}}, {f: store.Filter{Search: "nomatch"}},
	}
	b.ResetTimer()
	for range b.N {
		timeFilters(b, s, filters, ids)
	}
}

// benchStore opens an empty store for a List benchmark, closed at its end,
// and returns how many jobs to fill it with: RUNLOG_BENCH_HELD, default 1 M.
func benchStore(b *testing.B) (*Store, int) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("RUNLOG_BENCH_HELD")); err == nil && v > 0 {
		n = v
	}
	s, err := Open(b.TempDir(), Options{State: state.Config{Circuit: retry.DefaultCircuit()}, Now: 1_700_000_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, n
}
