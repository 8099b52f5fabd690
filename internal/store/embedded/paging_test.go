package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/store/storetest"
	"github.com/runlog/runlog/retry"
)

// fillStore makes n jobs in mixed states through the store
// (storetest.FillHeld, all at one time); the spiller moves the finished
// ones to the table except the last batch's. It returns them in id order.
func fillStore(tb testing.TB, s *Store, n int) []storetest.HeldJob {
	tb.Helper()
	return storetest.FillHeld(tb, s, storetest.HeldFill{N: n, From: 1_700_000_000_000, To: 1_700_000_000_000, Settle: s.settle})
}

// pagingFilter is a filter with its test on what the fill made.
type pagingFilter struct {
	f     store.Filter
	match func(storetest.HeldJob) bool
}

// pagingFilters are the filters the paging test walks, each with its test.
func pagingFilters() []pagingFilter {
	is := func(st state.JobState) func(storetest.HeldJob) bool {
		return func(h storetest.HeldJob) bool { return h.State == st }
	}
	return []pagingFilter{
		{store.Filter{}, func(storetest.HeldJob) bool { return true }},
		{store.Filter{State: "pending"}, is(state.Pending)},
		{store.Filter{State: "succeeded"}, is(state.Succeeded)},
		{store.Filter{State: "failed"}, is(state.Failed)},
		{store.Filter{State: "cancelled"}, is(state.Cancelled)},
		{store.Filter{Kind: "k2"}, func(h storetest.HeldJob) bool { return h.Kind() == "k2" }},
		{store.Filter{Target: "t3"}, func(h storetest.HeldJob) bool { return h.Target() == "t3" }},
		{store.Filter{Target: "t-done"}, func(h storetest.HeldJob) bool { return h.Target() == "t-done" }},
		{store.Filter{State: "failed", Kind: "k1"}, func(h storetest.HeldJob) bool { return h.State == state.Failed && h.Kind() == "k1" }},
		{store.Filter{State: "succeeded", Target: "t4"}, func(h storetest.HeldJob) bool { return h.State == state.Succeeded && h.Target() == "t4" }},
		{store.Filter{Kind: "k3", Target: "t5"}, func(h storetest.HeldJob) bool { return h.Kind() == "k3" && h.Target() == "t5" }},
		{store.Filter{Search: "key-12"}, func(h storetest.HeldJob) bool { return strings.HasPrefix(h.Key(), "key-12") }},
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
	s := openPaging(t)
	checkPaging(t, s, fillStore(t, s, n))
}

// TestTargetWithNoLiveJobs: a target none of whose jobs is pending or
// running is listed from the finished jobs memory still holds (not a scan
// of the backlog) and the table's: every page of every filter still
// returns every match exactly once.
func TestTargetWithNoLiveJobs(t *testing.T) {
	t.Parallel()
	s := openPaging(t)
	held := fillStore(t, s, 20_000)
	if err := s.settle(); err != nil {
		t.Fatal(err)
	}
	// Jobs of t-done that finish while the spiller is stopped stay in
	// memory beside those in the table.
	s.sp.stop()
	ctx := context.Background()
	now := int64(1_700_000_000_000)
	var more []store.NewJob
	for n := 1_000_001; n < 1_005_000; n += 1000 {
		h := storetest.HeldJob{N: n}
		more = append(more, store.NewJob{Due: now, Spec: state.Spec{Kind: h.Kind(), Target: h.Target(), Key: h.Key(), Policy: retry.Policy{Attempts: 1}}})
	}
	res, err := s.Enqueue(ctx, now, more)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := s.Claim(ctx, now, store.Limits{Max: len(more)})
	if err != nil || len(cs) != len(more) {
		t.Fatalf("claim: %d of %d jobs, %v", len(cs), len(more), err)
	}
	outs := make([]store.Outcome, len(cs))
	for i, c := range cs {
		outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
	}
	if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	pending, running := s.st.TargetLive("t-done")
	_, inMemory := s.st.Job(res[0].ID)
	s.mu.Unlock()
	if pending != 0 || running != 0 || !inMemory {
		t.Fatalf("t-done: %d pending, %d running, a finished job in memory %v: the test needs none live and some finished in memory", pending, running, inMemory)
	}
	for i, r := range res {
		held = append(held, storetest.HeldJob{ID: r.ID, N: 1_000_001 + 1000*i, State: state.Succeeded})
	}
	checkPaging(t, s, held)
}

// openPaging opens an empty store for a paging test, closed at its end.
func openPaging(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{Journal: journal.Options{NoPreallocate: true}, State: state.Config{Circuit: retry.DefaultCircuit()}, Now: 1_700_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// checkPaging walks every page of every paging filter in both orders and
// checks that it returns every job of held that passes, exactly once, in
// order, with no short or empty page before the end.
func checkPaging(t *testing.T, s *Store, held []storetest.HeldJob) {
	t.Helper()
	ctx := context.Background()
	for _, pf := range pagingFilters() {
		var want []uint64
		for _, h := range held {
			if pf.match(h) {
				want = append(want, h.ID)
			}
		}
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
// 1 M; the figure is 10 M) finished over 23 hours under the
// default retention (so in as many partitions as a store that ran that
// long holds), and times, per filter, the first page of 50 and pages from
// random cursors, and Job of random finished jobs, reporting p50 and p99.
// With RUNLOG_BENCH_HELD_DIR it fills that directory once and later runs
// reopen it (the jobs made are kept in held.bin beside the store), so
// that two builds can be timed alternately on the same jobs. With
// RUNLOG_BENCH_HEAPPROF=path it writes a heap profile of what is live
// when the timing starts (the store's memory tier beside the
// benchmark's own lists), to see what a GC cycle in the timing marks.
func BenchmarkListHeld(b *testing.B) {
	dir := os.Getenv("RUNLOG_BENCH_HELD_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	s, n := benchStore(b, dir)
	start := time.Now()
	held, err := readHeld(filepath.Join(dir, "held.bin"))
	if err != nil {
		b.Fatal(err)
	}
	if held == nil {
		if c := s.st.Counts(); c.Total() != 0 {
			b.Fatalf("%s holds %d jobs but no held.bin (a fill cut short?): remove it and fill again", dir, c.Total())
		}
		from := int64(1_700_000_000_000)
		held = storetest.FillHeld(b, s, storetest.HeldFill{N: n, From: from, To: from + 23*3_600_000, Settle: s.settle})
		if err := s.settle(); err != nil {
			b.Fatal(err)
		}
		if err := writeHeld(filepath.Join(dir, "held.bin"), held); err != nil {
			b.Fatal(err)
		}
	}
	parts, _ := s.st.Parts()
	b.Logf("%d jobs filled or reopened in %v; %d partitions", len(held), time.Since(start), len(parts))
	ids := make([]uint64, 0, len(held))
	var finished []uint64
	for _, h := range held {
		ids = append(ids, h.ID)
		if h.State != state.Pending {
			finished = append(finished, h.ID)
		}
	}
	ctx := context.Background()
	if path := os.Getenv("RUNLOG_BENCH_HEAPPROF"); path != "" {
		runtime.GC()
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.ResetTimer()
	for range b.N {
		key, id := held[len(held)/3].N/10*10, finished[len(finished)/2]
		filters := append(pagingFilters(),
			pagingFilter{f: store.Filter{Search: "key-" + strconv.Itoa(key)}},
			pagingFilter{f: store.Filter{Search: strconv.FormatUint(id, 10)}})
		timeFilters(b, s, filters, ids)
		var gets storetest.Timings
		runtime.LockOSThread()
		for k := range 2000 {
			gets.Time(func() {
				if _, err := s.Job(ctx, finished[(k*104729)%len(finished)]); err != nil {
					b.Fatal(err)
				}
			})
		}
		runtime.UnlockOSThread()
		b.ReportMetric(float64(gets.P99().Microseconds())/1000, "job-p99-ms")
		fmt.Printf("Job(id) of a finished job: %v\n", &gets)
	}
}

// timeFilters times List, per filter and in both orders, on the first
// page of 50 and on pages from 200 cursors among ids, and reports and
// prints the p50 and p99 of each, wall and CPU.
func timeFilters(b *testing.B, s *Store, filters []pagingFilter, ids []uint64) {
	ctx := context.Background()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i, pf := range filters {
		for _, oldest := range []bool{false, true} {
			var first, later storetest.Timings
			for k := range 400 {
				f := pf.f
				f.Limit, f.Oldest = 50, oldest
				t := &first
				if k%2 == 1 {
					f.After, t = ids[(k*7919)%len(ids)], &later
				}
				t.Time(func() {
					if _, _, err := s.List(ctx, f); err != nil {
						b.Fatal(err)
					}
				})
			}
			order := "newest"
			if oldest {
				order = "oldest"
			}
			b.ReportMetric(float64(first.P99().Microseconds())/1000, fmt.Sprintf("f%d-%s-first-p99-ms", i, order))
			b.ReportMetric(float64(later.P99().Microseconds())/1000, fmt.Sprintf("f%d-%s-later-p99-ms", i, order))
			// Printed, not logged: a benchmark's log is cut at 10 lines.
			fmt.Printf("%-24s %s first: first page %v; later pages %v\n", filterName(pf.f), order, &first, &later)
		}
	}
}

// writeHeld writes the jobs a fill made to path.
func writeHeld(path string, held []storetest.HeldJob) error {
	buf := make([]byte, 0, 17*len(held))
	for _, h := range held {
		buf = binary.LittleEndian.AppendUint64(buf, h.ID)
		buf = binary.LittleEndian.AppendUint64(buf, uint64(h.N))
		buf = append(buf, byte(h.State))
	}
	return os.WriteFile(path, buf, 0o644)
}

// readHeld reads what writeHeld wrote to path; nil if there is no file.
func readHeld(path string) ([]storetest.HeldJob, error) {
	buf, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil || len(buf)%17 != 0 {
		return nil, fmt.Errorf("%s: %v, %d bytes: remove the directory and fill it again", path, err, len(buf))
	}
	held := make([]storetest.HeldJob, 0, len(buf)/17)
	for ; len(buf) > 0; buf = buf[17:] {
		held = append(held, storetest.HeldJob{ID: binary.LittleEndian.Uint64(buf), N: int(binary.LittleEndian.Uint64(buf[8:])), State: state.JobState(buf[16])})
	}
	return held, nil
}

// filterName names f's fields that are set: "state=failed kind=k1", or
// "all".
func filterName(f store.Filter) string {
	var parts []string
	for _, p := range [][2]string{{"state", f.State}, {"kind", f.Kind}, {"target", f.Target}, {"search", f.Search}} {
		if p[1] != "" {
			parts = append(parts, p[0]+"="+p[1])
		}
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// BenchmarkListBacklog times List over a backlog: RUNLOG_BENCH_HELD
// pending jobs (default 1 M; the figure is 10 M), each with a key
// order-NNNNNNN, of kind common but one in 10 000 of kind sparse, plus
// 3 000 failed jobs of kind rare (in the table): the filters a dashboard
// search and a kind's page ask for, where the matches among the pending
// jobs are none, few or many.
func BenchmarkListBacklog(b *testing.B) {
	s, n := benchStore(b, b.TempDir())
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

// defaultRetention is runlog's default retention: 24 hours for succeeded
// and cancelled jobs, 7 days for failed ones.
func defaultRetention() *state.Retention {
	const hour = 3_600_000
	return &state.Retention{SucceededMS: 24 * hour, CancelledMS: 24 * hour, FailedMS: 7 * 24 * hour}
}

// benchStore opens the store in dir for a List benchmark, under the
// default retention, closed at its end, and returns how many jobs to fill
// it with: RUNLOG_BENCH_HELD, default 1 M.
func benchStore(b *testing.B, dir string) (*Store, int) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("RUNLOG_BENCH_HELD")); err == nil && v > 0 {
		n = v
	}
	s, err := Open(dir, Options{State: state.Config{Circuit: retry.DefaultCircuit()}, Retention: defaultRetention(), Now: 1_700_000_000_000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, n
}
