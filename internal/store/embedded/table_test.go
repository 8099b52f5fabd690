package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/internal/testwait"
	"github.com/runlog/runlog/retry"
)

// copyTree copies directory src into dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// walkAll returns the ids of every job that passes f, walking its pages
// oldest first.
func walkAll(t *testing.T, s *Store, f store.Filter) []uint64 {
	t.Helper()
	f.Oldest, f.Limit = true, 97
	var ids []uint64
	for {
		page, next, err := s.List(context.Background(), f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		for _, j := range page {
			ids = append(ids, j.ID)
		}
		if next == 0 {
			return ids
		}
		f.After = next
	}
}

// checkFilters checks that every filter (each field and each pair and all
// three) lists exactly the jobs of the unfiltered list that pass it.
func checkFilters(t *testing.T, s *Store) {
	t.Helper()
	type held struct{ state, kind, target string }
	all := make(map[uint64]held)
	ctx := context.Background()
	for _, id := range walkAll(t, s, store.Filter{}) {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		all[id] = held{state: j.State.String(), kind: j.Spec.Kind, target: j.Spec.Target}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != st.Counts.Total() || len(all) == 0 {
		t.Fatalf("the unfiltered list has %d jobs, the counts say %d", len(all), st.Counts.Total())
	}
	for _, stn := range []string{"", "succeeded", "failed", "cancelled", "pending"} {
		for _, kind := range []string{"", "k1", "k4"} {
			for _, target := range []string{"", "t2", "t6"} {
				f := store.Filter{State: stn, Kind: kind, Target: target}
				var want []uint64
				for id, h := range all {
					if (stn == "" || h.state == stn) && (kind == "" || h.kind == kind) && (target == "" || h.target == target) {
						want = append(want, id)
					}
				}
				slices.Sort(want)
				if got := walkAll(t, s, f); !slices.Equal(got, want) {
					t.Errorf("%+v: %d jobs, want %d (first difference at %d)", f, len(got), len(want), firstDiff(got, want))
				}
			}
		}
	}
}

// TestFormat1TableOpens: a directory written by runlog before the filter
// indexes carried the end state (testdata/table1dir: 3000 jobs of
// fillStore, the finished ones in a format 1 table) opens, its indexes
// rebuilt: every filter and pair of filters lists what it should. A crash
// before the rebuild is marked done (the table left at format 1 with new
// entries written) rebuilds again to the same answers.
func TestFormat1TableOpens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyTree(t, filepath.Join("testdata", "table1dir"), dir)
	opts := Options{Journal: journal.Options{NoPreallocate: true}, State: state.Config{Circuit: retry.DefaultCircuit()}, Now: 1_700_000_000_000}
	open := func() *Store {
		t.Helper()
		s, err := Open(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := s.tbl.get(metaKey("version")); err != nil || !slices.Equal(v, []byte{tableVersion}) {
			t.Fatalf("table format %v (%v), want %d", v, err, tableVersion)
		}
		return s
	}
	s := open()
	if held := finishedHeld(s.st); held == s.st.Counts().Total()-s.st.Counts().Pending {
		t.Fatalf("memory holds all %d finished jobs: the test needs them in the table", held)
	}
	checkFilters(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The crash before the mark: format 1 with format 2 entries.
	db, err := pebble.Open(filepath.Join(dir, tableDir), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set(metaKey("version"), []byte{1}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	checkFilters(t, s)
}

// BenchmarkSpillBatch times the spiller's table write of finished jobs
// (the batch of records and index entries, and its commit into the
// memtable, flushes and compactions included as they come), per job, for
// jobs like the benchmark's W1 ones (a 50-byte payload, one attempt).
func BenchmarkSpillBatch(b *testing.B) {
	t, err := openTable(nil, b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer t.close()
	const round = 4096
	jobs := make([]state.Job, round)
	b.ReportAllocs()
	b.ResetTimer()
	id := uint64(1)
	for done := 0; done < b.N; done += round {
		for i := range jobs {
			jobs[i] = state.Job{ID: id, State: state.Succeeded, Spec: &state.Spec{Kind: "bench", Target: "t" + string(rune('0'+id%7)), Payload: make([]byte, 50), Policy: retry.DefaultPolicy()},
				Run: &state.Run{Part: 1_700_000_000_000, Attempts: []state.Attempt{{N: 1, StartedAt: 1_700_000_000_000, EndedAt: 1_700_000_000_001, Class: retry.Success, Ended: true}}}}
			id++
		}
		batch := t.db.NewBatch()
		puts := make([]finishedPut, len(jobs))
		for i := range jobs {
			puts[i] = finishedPut{&jobs[i], jobs[i].Spec.Payload}
		}
		putFinished(batch, puts)
		if err := batch.Commit(pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
}

// TestSpillerCopiesOutWithoutAsking: finished jobs leave memory for the
// table with nobody waiting on the spiller: once the store is quiet, and,
// while ops keep coming, within spillMaxDelay of the first one waiting;
// then, the load being steady, at each full batch, until a quiet round;
// a round asked for on a quiet store does not make the load steady.
func TestSpillerCopiesOutWithoutAsking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := int64(1_700_000_000_000)
	s, err := Open(t.TempDir(), Options{Journal: journal.Options{NoPreallocate: true}, State: state.Config{Circuit: testCircuit}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	finish := func(n int) {
		jobs := make([]store.NewJob, n)
		for i := range jobs {
			jobs[i] = store.NewJob{Due: now, Spec: state.Spec{Kind: "k", Policy: retry.Policy{Attempts: 1}}}
		}
		if _, err := s.Enqueue(ctx, now, jobs); err != nil {
			t.Fatal(err)
		}
		cs, err := s.Claim(ctx, now, store.Limits{Max: n})
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]store.Outcome, len(cs))
		for i, c := range cs {
			outs[i] = store.Outcome{ID: c.ID, Attempt: c.Attempt, Class: retry.Success, AfterMS: -1}
		}
		if _, err := s.Finish(ctx, now, func() uint32 { return 0 }, outs, store.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	inMemory := func() (int, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		n := s.st.DoneLen()
		return n, n == 0
	}
	finish(10)
	testwait.UntilWithin(t, 20*time.Second, "the finished jobs of a quiet store copied out", inMemory)

	// Busy: an enqueue at every turn, never 50 ms apart.
	finish(10)
	stop := make(chan struct{})
	busy := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				busy <- nil
				return
			default:
			}
			if _, err := s.Enqueue(ctx, now, []store.NewJob{{Due: now + 3_600_000, Spec: state.Spec{Kind: "k"}}}); err != nil {
				busy <- err
				return
			}
		}
	}()
	testwait.UntilWithin(t, 20*time.Second, "the finished jobs of a busy store copied out", inMemory)
	// The store stayed busy through that round: the load is steady, and
	// the spiller copies each batch as it fills, not at spillMax.
	if !s.sp.steady.Load() {
		t.Error("a round while ops kept coming did not mark the load steady")
	}
	finish(spillBatch)
	testwait.UntilWithin(t, 20*time.Second, "a full batch of a steady store copied out", inMemory)
	close(stop)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	// A quiet round ends the steady load: the next burst waits again.
	finish(10)
	testwait.UntilWithin(t, 20*time.Second, "the finished jobs of a quiet store copied out", inMemory)
	testwait.UntilWithin(t, 20*time.Second, "a quiet round ending the steady load", func() (int, bool) {
		return 0, !s.sp.steady.Load()
	})
	// A round someone asks for (a checkpoint's) says nothing of the load:
	// the store stays out of the steady mode. The second ask is taken
	// only once the first one's round is over.
	for range 2 {
		s.mu.Lock()
		s.sp.hurryLocked()
		s.mu.Unlock()
		testwait.UntilWithin(t, 20*time.Second, "the spiller taking the ask", func() (int, bool) {
			s.mu.Lock()
			defer s.mu.Unlock()
			return 0, !s.sp.force
		})
	}
	if s.sp.steady.Load() {
		t.Error("a round asked for on a quiet store marked the load steady")
	}
}

// TestPointKeysFilter: the tables' bloom filters hold the keys read by a
// point read and not the filter indexes' entries (a table's filter is
// less than half the size of the whole-key filter of the same jobs), every
// record and idempotency key is found through them, and a table written
// with whole-key filters (before pointFilter) still reads.
func TestPointKeysFilter(t *testing.T) {
	t.Parallel()
	jobs := make([]state.Job, 3000)
	for i := range jobs {
		id := uint64(i + 1)
		jobs[i] = state.Job{ID: id, State: state.Succeeded, Spec: &state.Spec{Kind: "k" + strconv.Itoa(i%3), Target: "t" + strconv.Itoa(i%7), Key: "key-" + strconv.Itoa(i), Payload: []byte("{}"), Policy: retry.DefaultPolicy()},
			Run: &state.Run{Part: 1_700_000_000_000 + int64(i%2)*3_600_000, Attempts: []state.Attempt{{N: 1, StartedAt: 1, EndedAt: 2, Class: retry.Success, Ended: true}}}}
	}
	// write fills a table in dir with jobs, with policy as the levels'
	// filter, and returns the filter bytes of its files and their policy.
	write := func(dir string, policy pebble.FilterPolicy) (uint64, string) {
		o, cache := tableOptions(nil, nil, false)
		defer cache.Unref()
		for i := range o.Levels {
			o.Levels[i].FilterPolicy = policy
		}
		db, err := pebble.Open(filepath.Join(dir, tableDir), o)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		b := db.NewBatch()
		puts := make([]finishedPut, len(jobs))
		for i := range jobs {
			puts[i] = finishedPut{&jobs[i], jobs[i].Spec.Payload}
		}
		putFinished(b, puts)
		b.Set(metaKey("version"), []byte{tableVersion}, nil)
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		levels, err := db.SSTables(pebble.WithProperties())
		if err != nil {
			t.Fatal(err)
		}
		var size uint64
		var name string
		for _, level := range levels {
			for _, f := range level {
				size += f.Properties.FilterSize
				name = f.Properties.FilterPolicyName
			}
		}
		return size, name
	}
	read := func(dir string) {
		t.Helper()
		tbl, err := openTable(nil, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tbl.close()
		parts := []int64{1_700_000_000_000, 1_700_003_600_000}
		for _, j := range jobs {
			got, err := tbl.finished(j.ID, parts)
			if err != nil || got == nil || got.ID != j.ID {
				t.Fatalf("job %d: %v, %v", j.ID, got, err)
			}
			if id, ok, err := tbl.byKey(j.Spec.Key, parts); err != nil || !ok || id != j.ID {
				t.Fatalf("key %q: %d %v %v, want %d", j.Spec.Key, id, ok, err, j.ID)
			}
		}
		if got, err := tbl.finished(uint64(len(jobs)+1), parts); err != nil || got != nil {
			t.Fatalf("a job never written: %v, %v", got, err)
		}
	}
	point, whole := t.TempDir(), t.TempDir()
	pointSize, name := write(point, pointFilter)
	wholeSize, _ := write(whole, wholeFilter)
	if name != pointFilter.Name() {
		t.Errorf("the table's filter is %q, want %q", name, pointFilter.Name())
	}
	if pointSize*2 > wholeSize {
		t.Errorf("filters of %d bytes, against %d for every key: the index entries are in them", pointSize, wholeSize)
	}
	read(point)
	read(whole)
}

// TestStreamSpan: every file the table writes, by a flush or a compaction,
// holds keys of one stream (streamEnd), so that a round of finished jobs
// flushed after others overlaps none of their files but its streams' last
// ones; and the compaction that splits them keeps every key.
func TestStreamSpan(t *testing.T) {
	t.Parallel()
	o, cache := tableOptions(nil, nil, false)
	defer cache.Unref()
	db, err := pebble.Open(filepath.Join(t.TempDir(), tableDir), o)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	parts := []int64{-3_600_000, 1_700_000_000_000}
	var id uint64
	checkFiles := func(when string) {
		t.Helper()
		levels, err := db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		files := 0
		for level, fs := range levels {
			for _, f := range fs {
				files++
				lo, hi := f.Smallest.UserKey, f.Largest.UserKey
				if end := streamEnd(lo); end != nil && bytes.Compare(hi, end) >= 0 {
					t.Errorf("%s: L%d file %s spans streams: %x to %x (its first stream ends at %x)", when, level, f.FileNum, lo, hi, end)
				}
			}
		}
		if files == 0 {
			t.Fatalf("%s: no files", when)
		}
	}
	for round := range 6 {
		b := db.NewBatch()
		var puts []finishedPut
		for i := range 500 {
			id++
			st := state.Succeeded
			if i%5 == 0 {
				st = state.Failed
			}
			sp := &state.Spec{Kind: "k" + strconv.Itoa(i%3), Target: "t" + strconv.Itoa(i%7), Payload: []byte("{}"), Policy: retry.DefaultPolicy()}
			if i%2 == 0 {
				sp.Key = "key-" + strconv.FormatUint(id, 10)
			}
			if i%4 == 0 {
				sp.Schedule = "nightly"
			}
			j := &state.Job{ID: id, State: st, Spec: sp, Run: &state.Run{Part: parts[i%2], Attempts: []state.Attempt{{N: 1, StartedAt: 1, EndedAt: 2, Class: retry.Success, Ended: true}}}}
			puts = append(puts, finishedPut{j, sp.Payload})
		}
		putFinished(b, puts)
		b.Set(payloadKey(id+1), []byte("pending"), nil)
		b.Set(metaKey("version"), []byte{tableVersion}, nil)
		if err := b.Commit(pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
		checkFiles("flush " + strconv.Itoa(round))
	}
	countKeys := func() int {
		t.Helper()
		it, err := db.NewIter(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		n := 0
		for it.First(); it.Valid(); it.Next() {
			n++
		}
		if err := it.Error(); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := countKeys()
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	checkFiles("after a full compaction")
	if after := countKeys(); after != before || after == 0 {
		t.Errorf("the table held %d keys before the compaction, %d after", before, after)
	}
}

// TestStreamEnd: the end of each kind of key's stream, always after the
// key.
func TestStreamEnd(t *testing.T) {
	rec := recordKey(5, 9)
	for _, c := range []struct {
		name string
		key  []byte
		want []byte
	}{
		{"payload", payloadKey(7), []byte("m")},
		{"metadata", metaKey("version"), []byte("n")},
		{"record", rec, append(partPrefix(nil, 5), tagRecord+1)},
		{"state index", binary.BigEndian.AppendUint64(statePrefix(5, state.Failed), 3), append(partPrefix(nil, 5), tagState, byte(state.Failed)+1)},
		{"target index", append(valuePrefix(5, 't', "http://x"), byte(state.Succeeded), 0, 1), append(partPrefix(nil, 5), 't'+1)},
		{"key", keyKey(-5, "k"), append(partPrefix(nil, -5), tagKey+1)},
		{"short", []byte("p12"), []byte("q")},
		{"end of the keyspace", []byte{0xff, 1}, nil},
	} {
		if got := streamEnd(c.key); !bytes.Equal(got, c.want) {
			t.Errorf("%s: streamEnd(%x) = %x, want %x", c.name, c.key, got, c.want)
		}
		if got := streamEnd(c.key); got != nil && bytes.Compare(got, c.key) <= 0 {
			t.Errorf("%s: streamEnd(%x) = %x, not after the key", c.name, c.key, got)
		}
	}
}
