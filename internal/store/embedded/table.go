package embedded

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"

	"github.com/runlog/runlog/internal/state"
)

// The job table is the on-disk tier of the embedded store: a pebble
// database in the directory's "table" subdirectory that holds the finished
// jobs the state evicted (their spec, payload, history, outcome and reason)
// with an index per filter, and the payloads of pending jobs spilled out of
// memory. It is never the truth: every entry is derived from journaled ops
// and written only after they are durable, each write is idempotent, and
// the checkpoint (see snapshotter) makes the table durable before the
// snapshot that relies on it is published. Pebble's own write-ahead log is
// off: the journal is the log.
//
// Keys (integers big-endian, so that byte order is numeric order; a
// partition end is biased by 1<<63 so that negative ends sort first):
//
//	"l" id                          payload of a pending job (spilled)
//	"m" name                        table metadata ("mversion")
//	"p" end "r" id                  a finished job (state.AppendJob)
//	"p" end "s" state id            index by end state
//	"p" end "k" len kind state id   index by kind, then end state (len: uvarint)
//	"p" end "t" len target state id index by target, then end state
//	"p" end "c" len schedule id     index by schedule, only of jobs a schedule made
//	"p" end "y" key                 idempotency key → id
//
// Every key of a finished job lies under its expiry partition's prefix, so
// that expiry is one range deletion of the partitions that ended. The
// filter indexes (filterIndexes) carry the end state after the value, so
// that a filter with a state is one range and a filter alone is the merge
// of the three finished states' ranges; their entries' values hold the
// job's value for every filter index (entryValue), so that a query with
// two filters reads only the records that pass both. Format 1 (before)
// had no state in their keys and empty values; openTable rebuilds them
// (reindex).
type table struct {
	db   *pebble.DB
	path string
	fs   pebblevfs.FS // the filesystem the table lives on (backup.go reads it)

	mu      sync.Mutex
	err     error         // guarded by mu: the first background error
	failed  chan struct{} // closed at the first background error
	closing bool          // guarded by mu: the store is closing (see background)
	open    bool          // guarded by mu: err came before closing began
}

// beginClose tells the table that its store is closing: from now on a
// background failure only fails the final checkpoint (the journal keeps
// every record, and the previous checkpoint stays good), it does not make
// the store report a failure.
func (t *table) beginClose() {
	t.mu.Lock()
	t.closing = true
	t.mu.Unlock()
}

// background records a failure pebble met in the background (a flush or
// compaction that could not write, a checksum mismatch): like one of the
// journal's, it is permanent for this store.
func (t *table) background(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	t.err = tableError(t.path, err)
	t.open = !t.closing
	close(t.failed)
}

// failedOpen returns the table's background failure if it happened before
// the store began to close.
func (t *table) failedOpen() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.open {
		return nil
	}
	return t.err
}

// failure returns the table's background failure, or nil.
func (t *table) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// flush makes every committed write durable; it gives up when the table
// fails meanwhile (pebble retries a failed flush in the background, and a
// full disk would otherwise hold the caller for ever).
func (t *table) flush() error {
	done, err := t.db.AsyncFlush()
	if err != nil {
		return tableError(t.path, err)
	}
	select {
	case <-done:
		return t.failure()
	case <-t.failed:
		return t.failure()
	}
}

// tableVersion is the table format this build writes ("mversion"); it
// opens format 1 too, rebuilding its filter indexes (reindex).
const tableVersion = 2

// tableDir is the table's subdirectory in a store's directory.
const tableDir = "table"

// tableCacheBytes is the size of the table's block cache.
const tableCacheBytes = 32 << 20

// tableOptions are the pebble options of a table on fsys.
func tableOptions(fsys pebblevfs.FS, logf func(string, ...any), readOnly bool) (*pebble.Options, interface{ Unref() }) {
	cache := pebble.NewCache(tableCacheBytes)
	o := &pebble.Options{
		FS:           fsys,
		Cache:        cache,
		DisableWAL:   true,
		MemTableSize: 8 << 20,
		ReadOnly:     readOnly,
		Logger:       pebbleLogger{logf},
	}
	o.Experimental.SpanPolicyFunc = streamSpan // a file per key stream
	// Tables written before pointFilter have whole bloom filters: the
	// reader finds their policy by its name.
	o.Filters = map[string]pebble.FilterPolicy{wholeFilter.Name(): wholeFilter, pointFilter.Name(): pointFilter}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = pointFilter
	}
	// The read that meets a damaged block returns pebble's corruption
	// error (tableError names the table and the remedy); pebble's default
	// would end the process.
	o.EventListener = &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		if logf != nil {
			logf("runlog: job table: damaged file %s: %v", info.Path, info.Details)
		}
	}}
	return o, cache
}

// streamSpan is the tables' span policy: it ends every file pebble writes
// (a flush's or a compaction's) where the key stream of its first key
// ends, so that a file holds keys of one stream. A finished job's keys lie
// in five streams of its partition (record, state index, two filter
// indexes, key), and each grows at its own end; when every flushed file
// spanned them all, it overlapped every older file of the table, and each
// compaction out of L0 rewrote most of it, the more the larger the table:
// W2 for 30 s wrote 764 MB for 81 MB that came in (write amplification
// 9.4), 262 MB (3.0) with a file per stream. The streams are the payloads,
// the metadata, and in each partition the records, the state index of
// each end state, each filter index, the schedule index and the keys: a
// bounded number whatever the kinds and targets (a stream per target
// would cut a flush into a file per target, and pebble never merges files
// that do not overlap). The keys' layout is unchanged: this only places
// the files' boundaries, and a table written before reads the same.
func streamSpan(start []byte) (pebble.SpanPolicy, []byte, error) {
	return pebble.SpanPolicy{}, streamEnd(start), nil
}

// streamEnd returns the first key after the stream that k is in (nil: the
// end of the keyspace).
func streamEnd(k []byte) []byte {
	switch {
	case len(k) == 0 || k[0] == 0xff:
		return nil
	case k[0] != 'p' || len(k) < 10:
		return []byte{k[0] + 1}
	case k[9] == tagState && len(k) > 10:
		return prefixEnd(k[:11])
	default:
		return prefixEnd(k[:10])
	}
}

// wholeFilter is the bloom filter of every key, 10 bits a key (about 1 %
// false positives), which tables written before pointFilter carry.
var wholeFilter = bloom.FilterPolicy(10)

// pointFilter is the tables' filter: wholeFilter's bloom filter of the
// keys the store reads by a point read (records, idempotency keys,
// payloads, metadata), without the entries of the filter indexes, which
// are only ever read by ranges. Those entries were three of a job's five
// keys: with 10 M jobs the whole filters took 47.5 MB against the block
// cache's 32 MiB, so point reads evicted each other's filters and a
// search read filter blocks from disk (10-16 ms for its first page).
var pointFilter pebble.FilterPolicy = pointKeysFilter{wholeFilter}

// pointKeysFilter is pointFilter's type.
type pointKeysFilter struct{ bloom pebble.FilterPolicy }

// Name names the policy in the tables it writes.
func (pointKeysFilter) Name() string { return "runlog.PointKeysBloom10" }

// MayContain asks the bloom filter; the store never reads a key of a
// filter index by a point read, whose absence from the filter would hide
// it.
func (f pointKeysFilter) MayContain(ftype pebble.FilterType, filter, key []byte) bool {
	return f.bloom.MayContain(ftype, filter, key)
}

// NewWriter returns a writer that leaves out the filter indexes' keys.
func (f pointKeysFilter) NewWriter(ftype pebble.FilterType) pebble.FilterWriter {
	return pointKeysWriter{f.bloom.NewWriter(ftype)}
}

// pointKeysWriter adds the keys of point reads to a bloom filter.
type pointKeysWriter struct{ pebble.FilterWriter }

// AddKey adds key unless it is an entry of a filter index.
func (w pointKeysWriter) AddKey(key []byte) {
	if len(key) > 9 && key[0] == 'p' && isRangeTag(key[9]) {
		return
	}
	w.FilterWriter.AddKey(key)
}

// The tags of a partition's keys, the byte after its prefix (the layout
// above); the filter indexes' tags are in filterIndexes.
const (
	tagRecord   = 'r' // a finished job's record
	tagState    = 's' // the index by end state
	tagSchedule = 'c' // the index by schedule
	tagKey      = 'y' // an idempotency key
)

// isRangeTag reports whether tag, the byte after a partition's prefix,
// starts the entries of an index read only by ranges: the state index,
// the schedule index and each of filterIndexes.
func isRangeTag(tag byte) bool {
	if tag == tagState || tag == tagSchedule {
		return true
	}
	for _, ix := range filterIndexes {
		if ix.key == tag {
			return true
		}
	}
	return false
}

// pebbleLogger passes pebble's errors to the store's log and drops its
// informational lines.
type pebbleLogger struct{ logf func(string, ...any) }

func (l pebbleLogger) Infof(string, ...any) {}
func (l pebbleLogger) Errorf(format string, args ...any) {
	if l.logf != nil {
		l.logf("runlog: job table: "+format, args...)
	}
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("runlog: job table: "+format, args...))
}

// openTable opens (or creates) the table in dir/table.
func openTable(fsys pebblevfs.FS, dir string, logf func(string, ...any)) (*table, error) {
	path := filepath.Join(dir, tableDir)
	o, cache := tableOptions(fsys, logf, false)
	t := &table{path: path, fs: fsys, failed: make(chan struct{})}
	corrupt := o.EventListener.DataCorruption
	o.EventListener = &pebble.EventListener{
		BackgroundError: func(err error) {
			if logf != nil {
				logf("runlog: job table: %v", err)
			}
			t.background(err)
		},
		DataCorruption: func(info pebble.DataCorruptionInfo) {
			corrupt(info)
			t.background(fmt.Errorf("%w: file %s: %v", pebble.ErrCorruption, info.Path, info.Details))
		},
	}
	db, err := pebble.Open(path, o)
	cache.Unref()
	if err != nil {
		return nil, tableError(path, err)
	}
	t.db = db
	v, err := t.get(metaKey("version"))
	switch {
	case err != nil:
		db.Close()
		return nil, tableError(path, err)
	case v == nil:
		if err := db.Set(metaKey("version"), []byte{tableVersion}, pebble.NoSync); err != nil {
			db.Close()
			return nil, tableError(path, err)
		}
	case len(v) == 1 && v[0] == 1:
		if logf != nil {
			logf("runlog: job table %s: rebuilding its indexes for format %d", path, tableVersion)
		}
		if err := t.reindex(); err != nil {
			db.Close()
			return nil, err
		}
	case len(v) != 1 || v[0] != tableVersion:
		db.Close()
		return nil, fmt.Errorf("embedded: the job table %s has format %v, this build reads formats 1 and %d: open it with the runlog that wrote it", path, v, tableVersion)
	}
	if err := t.warm(); err != nil {
		db.Close()
		return nil, tableError(path, err)
	}
	return t, nil
}

// warmBytes bounds the index and filter blocks warm loads: half the
// block cache, so that what it loads stays there beside the data blocks
// that reads bring in.
const warmBytes = tableCacheBytes / 2

// warm reads one key of each table file, newest level first, so that the
// file is open and its index and filter blocks are in the block cache
// before the store's first read. Without it a reopened store's first
// search, which reads every partition, loaded them itself: 13-24 ms of a
// single List call for 10 M jobs in 112 files, against 1-2 ms once they
// are loaded. It stops when the files' index and filter blocks would fill
// more than warmBytes (a table bigger than that loads the rest on demand,
// as before). A damaged block fails the open, as any read of it would.
func (t *table) warm() error {
	levels, err := t.db.SSTables(pebble.WithProperties())
	if err != nil {
		return err
	}
	var loaded uint64
	for _, level := range levels {
		for _, f := range level {
			if f.Properties != nil {
				loaded += f.Properties.FilterSize + f.Properties.IndexSize
			}
			if loaded > warmBytes {
				return nil
			}
			_, closer, err := t.db.Get(f.Smallest.UserKey)
			switch {
			case err == nil:
				closer.Close()
			case !errors.Is(err, pebble.ErrNotFound):
				return err
			}
		}
	}
	return nil
}

// reindex rewrites the filter indexes of a format 1 table (runlog before
// the end state was part of them) from its records, then marks it format
// 2. The records, the state index, the keys and the payloads are the same
// in both formats. A crash before the mark leaves format 1, and the next
// open does it all again: the old and any new entries are range-deleted
// first, then written from the records.
func (t *table) reindex() error {
	fail := func(err error) error {
		return fmt.Errorf("embedded: rebuilding the indexes of the job table %s: %w", t.path, tableError(t.path, err))
	}
	ends, err := t.partitions()
	if err != nil {
		return fail(err)
	}
	b := t.db.NewBatch()
	for _, end := range ends {
		for _, ix := range filterIndexes {
			lo := append(partPrefix(nil, end), ix.key)
			b.DeleteRange(lo, append(partPrefix(nil, end), ix.key+1), nil)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fail(err)
	}
	b.Close()
	for _, end := range ends {
		lo := append(partPrefix(nil, end), tagRecord)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: append(partPrefix(nil, end), tagRecord+1)})
		if err != nil {
			return fail(err)
		}
		b := t.db.NewBatch()
		for it.First(); it.Valid(); it.Next() {
			j, err := state.DecodeJob(it.Value())
			if err != nil {
				it.Close()
				return fmt.Errorf("embedded: the job table %s holds a bad record (key %x): %w; restore the directory from a backup", t.path, it.Key(), err)
			}
			v := entryValue(j.Spec)
			for _, k := range indexKeys(j)[1:] { // the state index is unchanged
				b.Set(k, v, nil)
			}
			if b.Count() >= 64<<10 {
				if err := b.Commit(pebble.NoSync); err != nil {
					it.Close()
					return fail(err)
				}
				b.Close()
				b = t.db.NewBatch()
			}
		}
		err = it.Error()
		it.Close()
		if err == nil {
			err = b.Commit(pebble.NoSync)
		}
		b.Close()
		if err != nil {
			return fail(err)
		}
	}
	// The new entries are durable before the mark that relies on them.
	if err := t.db.Flush(); err != nil {
		return fail(err)
	}
	if err := t.db.Set(metaKey("version"), []byte{tableVersion}, pebble.NoSync); err != nil {
		return fail(err)
	}
	if err := t.db.Flush(); err != nil {
		return fail(err)
	}
	return nil
}

// partitions returns the ends of the partitions that hold keys, in order.
func (t *table) partitions() ([]int64, error) {
	it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'p'}, UpperBound: []byte{'q'}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var ends []int64
	for it.First(); it.Valid(); {
		k := it.Key()
		if len(k) < 9 {
			it.Next()
			continue
		}
		end := int64(binary.BigEndian.Uint64(k[1:9]) ^ 1<<63)
		ends = append(ends, end)
		if end == math.MaxInt64 {
			break
		}
		it.SeekGE(partPrefix(nil, end+1))
	}
	return ends, it.Error()
}

// tableError says which table failed and what to do.
func tableError(path string, err error) error {
	if pebble.IsCorruptionError(err) || errors.Is(err, pebble.ErrCorruption) {
		return fmt.Errorf("embedded: the job table %s is damaged (%w): the finished jobs it holds cannot be read; restore the directory from a backup", path, err)
	}
	return fmt.Errorf("embedded: job table %s: %w", path, err)
}

// close closes the table.
func (t *table) close() error { return t.db.Close() }

// get returns a copy of the value of key, or nil if it is absent.
func (t *table) get(key []byte) ([]byte, error) {
	v, c, err := t.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, tableError(t.path, err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	c.Close()
	return out, nil
}

func metaKey(name string) []byte { return append([]byte{'m'}, name...) }

func payloadKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, id) }

// partPrefix is the prefix of every key of partition end.
func partPrefix(dst []byte, end int64) []byte {
	dst = append(dst, 'p')
	return binary.BigEndian.AppendUint64(dst, uint64(end)^1<<63)
}

func recordKey(end int64, id uint64) []byte {
	k := append(partPrefix(make([]byte, 0, 18), end), tagRecord)
	return binary.BigEndian.AppendUint64(k, id)
}

// statePrefix is the prefix of the entries of the state index for st in
// partition end; an entry appends the id.
func statePrefix(end int64, st state.JobState) []byte {
	k := append(partPrefix(make([]byte, 0, 19), end), tagState)
	return append(k, byte(st))
}

// valuePrefix is the prefix of the entries of filter index ix for value v
// in partition end; an entry appends the end state and the id.
func valuePrefix(end int64, ix byte, v string) []byte {
	k := append(partPrefix(make([]byte, 0, 30+len(v)), end), ix)
	k = binary.AppendUvarint(k, uint64(len(v)))
	return append(k, v...)
}

// filterIndex is an index of the table by one filter of List: the value
// it files a job under, and the value a query asks for ("" any).
type filterIndex struct {
	key   byte
	value func(*state.Spec) string
	query func(*tableQuery) string
}

// filterIndexes are the filter indexes, the one a query uses first: a
// target names fewer jobs than a kind, as a rule. A new filter is one more
// entry here (with its key byte in the layout above) and a field in
// tableQuery.
var filterIndexes = []filterIndex{
	{'t', func(s *state.Spec) string { return s.Target }, func(q *tableQuery) string { return q.target }},
	{'k', func(s *state.Spec) string { return s.Kind }, func(q *tableQuery) string { return q.kind }},
}

func keyKey(end int64, key string) []byte {
	k := append(partPrefix(make([]byte, 0, 10+len(key)), end), tagKey)
	return append(k, key...)
}

// stateNamed returns the state whose String is name.
func stateNamed(name string) (state.JobState, bool) {
	for st := state.Pending; st <= state.Cancelled; st++ {
		if st.String() == name {
			return st, true
		}
	}
	return 0, false
}

// finishedPut is a finished job to write to the table, with its payload.
type finishedPut struct {
	j       *state.Job
	payload []byte
}

// putFinished adds to b the keys of finished jobs puts (sorting puts by
// partition and id). The keys go in runs of neighbours (the records, then
// the state index by state, then each filter index by value and state,
// each run in id order): pebble's memtable keeps its last position in its
// skiplist, and an insert next to it costs a fraction of a search from the
// top (a sort of all the keys costs more than it saves).
func putFinished(b *pebble.Batch, puts []finishedPut) {
	slices.SortFunc(puts, func(x, y finishedPut) int {
		return cmp.Or(cmp.Compare(x.j.Part(), y.j.Part()), cmp.Compare(x.j.ID, y.j.ID))
	})
	values := make([][]byte, len(puts))
	for i, p := range puts {
		c := *p.j
		sp := *p.j.Spec
		sp.Payload = p.payload
		c.Spec = &sp
		c.SetSpilled(false)
		b.Set(recordKey(c.Part(), c.ID), state.AppendJob(nil, &c), nil)
		values[i] = entryValue(p.j.Spec)
	}
	for st := state.Succeeded; st <= state.Cancelled; st++ {
		for _, p := range puts {
			if p.j.State == st {
				b.Set(binary.BigEndian.AppendUint64(statePrefix(p.j.Part(), st), p.j.ID), nil, nil)
			}
		}
	}
	type group struct {
		part int64
		v    string
		st   state.JobState
	}
	for _, ix := range filterIndexes {
		runs := make(map[group][]int)
		var order []group
		for i, p := range puts {
			g := group{p.j.Part(), ix.value(p.j.Spec), p.j.State}
			if _, ok := runs[g]; !ok {
				order = append(order, g)
			}
			runs[g] = append(runs[g], i)
		}
		for _, g := range order {
			prefix := append(valuePrefix(g.part, ix.key, g.v), byte(g.st))
			for _, i := range runs[g] {
				b.Set(binary.BigEndian.AppendUint64(prefix[:len(prefix):len(prefix)], puts[i].j.ID), values[i], nil)
			}
		}
	}
	for _, p := range puts {
		if p.j.Spec.Schedule != "" {
			b.Set(scheduleKey(p.j), nil, nil)
		}
	}
	for _, p := range puts {
		if p.j.Spec.Key != "" {
			b.Set(keyKey(p.j.Part(), p.j.Spec.Key), binary.BigEndian.AppendUint64(nil, p.j.ID), nil)
		}
	}
}

// deleteFinished adds to b the deletion of every key finished job j (as
// an image) has in its partition.
func deleteFinished(b *pebble.Batch, j *state.Job) {
	b.Delete(recordKey(j.Part(), j.ID), nil)
	for _, k := range indexKeys(j) {
		b.Delete(k, nil)
	}
	if j.Spec.Key != "" {
		b.Delete(keyKey(j.Part(), j.Spec.Key), nil)
	}
}

// indexKeys returns the index entries of finished job j: the state
// index's first, then the filter indexes'.
func indexKeys(j *state.Job) [][]byte {
	keys := make([][]byte, 0, 2+len(filterIndexes))
	keys = append(keys, binary.BigEndian.AppendUint64(statePrefix(j.Part(), j.State), j.ID))
	for _, ix := range filterIndexes {
		k := append(valuePrefix(j.Part(), ix.key, ix.value(j.Spec)), byte(j.State))
		keys = append(keys, binary.BigEndian.AppendUint64(k, j.ID))
	}
	if j.Spec.Schedule != "" {
		keys = append(keys, scheduleKey(j))
	}
	return keys
}

// scheduleKey is the entry of the schedule index of finished job j, which
// a schedule made: a sparse index (jobs enqueued by hand have none), read
// by a List of that schedule's jobs, which checks the other filters on the
// records.
func scheduleKey(j *state.Job) []byte {
	return binary.BigEndian.AppendUint64(valuePrefix(j.Part(), tagSchedule, j.Spec.Schedule), j.ID)
}

// entryValue is the value of every filter index entry of a job with spec
// sp: its value for each filter index, in order, each uvarint-length
// prefixed. A query with several filters checks the others on the entry
// and reads only the records that pass.
func entryValue(sp *state.Spec) []byte {
	var v []byte
	for _, ix := range filterIndexes {
		x := ix.value(sp)
		v = binary.AppendUvarint(v, uint64(len(x)))
		v = append(v, x...)
	}
	return v
}

// passesEntry reports whether a filter index entry of value v passes q's
// filters besides the state (which the entry's key holds); a value it
// cannot read passes (the record is checked).
func (q *tableQuery) passesEntry(v []byte) bool {
	for _, ix := range filterIndexes {
		n, w := binary.Uvarint(v)
		if w <= 0 || uint64(len(v)-w) < n {
			return true
		}
		x := v[w : w+int(n)]
		v = v[w+int(n):]
		if want := ix.query(q); want != "" && string(x) != want {
			return false
		}
	}
	return true
}

// dropParts adds to b the deletion of every partition that ends by at.
func dropParts(b *pebble.Batch, at int64) {
	lo := partPrefix(nil, math.MinInt64)
	if at == math.MaxInt64 {
		b.DeleteRange(lo, []byte{'q'}, nil)
		return
	}
	b.DeleteRange(lo, partPrefix(nil, at+1), nil)
}

// finished returns finished job id from the partitions parts, or nil.
func (t *table) finished(id uint64, parts []int64) (*state.Job, error) {
	for i := len(parts) - 1; i >= 0; i-- {
		v, err := t.get(recordKey(parts[i], id))
		if err != nil {
			return nil, err
		}
		if v != nil {
			j, err := state.DecodeJob(v)
			if err != nil {
				return nil, fmt.Errorf("embedded: the job table %s holds a bad record of job %d: %w; restore the directory from a backup", t.path, id, err)
			}
			return j, nil
		}
	}
	return nil, nil
}

// byKey returns the id of the finished job in parts that holds key.
func (t *table) byKey(key string, parts []int64) (uint64, bool, error) {
	for i := len(parts) - 1; i >= 0; i-- {
		v, err := t.get(keyKey(parts[i], key))
		if err != nil {
			return 0, false, err
		}
		if len(v) == 8 {
			return binary.BigEndian.Uint64(v), true, nil
		}
	}
	return 0, false, nil
}

// maxSearch bounds the jobs one key-prefix search collects.
const maxSearch = 100_000

// keyHit is a finished job found by its key: its id and partition.
type keyHit struct {
	id   uint64
	part int64
}

// maxSearchScratch bounds the key hits a store keeps for its next search
// (16 bytes each): a search with more allocates its own.
const maxSearchScratch = 1 << 16

// byKeyPrefix appends to ids the finished jobs in parts whose key starts
// with prefix and that keep passes, in no order; a prefix that more than
// maxSearch keys start with is refused.
func (t *table) byKeyPrefix(ids []keyHit, prefix string, parts []int64, keep func(uint64) bool) ([]keyHit, error) {
	seen := 0
	for _, end := range parts {
		lo := keyKey(end, prefix)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			return nil, tableError(t.path, err)
		}
		for it.First(); it.Valid(); it.Next() {
			if seen++; seen > maxSearch {
				it.Close()
				return nil, fmt.Errorf("embedded: more than %d finished jobs have a key that starts with %q: search for a longer prefix", maxSearch, prefix)
			}
			if v := it.Value(); len(v) == 8 {
				if id := binary.BigEndian.Uint64(v); keep(id) {
					ids = append(ids, keyHit{id: id, part: end})
				}
			}
		}
		err = it.Error()
		it.Close()
		if err != nil {
			return nil, tableError(t.path, err)
		}
	}
	return ids, nil
}

// prefixEnd returns the first key after every key that starts with p,
// which holds a byte below 0xff.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic("embedded: prefixEnd of a key of 0xff bytes")
}

// record returns finished job id of partition part, or nil.
func (t *table) record(id uint64, part int64) (*state.Job, error) {
	v, err := t.get(recordKey(part, id))
	if err != nil || v == nil {
		return nil, err
	}
	j, err := state.DecodeJob(v)
	if err != nil {
		return nil, fmt.Errorf("embedded: the job table %s holds a bad record of job %d: %w; restore the directory from a backup", t.path, id, err)
	}
	return j, nil
}

// payload returns the spilled payload of job id (nil if there is none).
func (t *table) payload(id uint64) ([]byte, error) {
	return t.get(payloadKey(id))
}

// payloadOf returns the payload of job j, which the state holds with its
// payload spilled. A finished job's spilled payload moves into its record
// in the same batch (putFinished), so a snapshot that still holds the job
// finds it there.
func (t *table) payloadOf(j *state.Job) ([]byte, error) {
	p, err := t.payload(j.ID)
	if err != nil || p != nil {
		return p, err
	}
	if j.State.Finished() {
		rec, err := t.get(recordKey(j.Part(), j.ID))
		if err != nil {
			return nil, err
		}
		if rec != nil {
			r, err := state.DecodeJob(rec)
			if err != nil {
				return nil, fmt.Errorf("embedded: the job table %s holds a bad record of job %d: %w; restore the directory from a backup", t.path, j.ID, err)
			}
			return r.Spec.Payload, nil
		}
	}
	return nil, fmt.Errorf("embedded: the job table %s lost the payload of job %d; restore the directory from a backup", t.path, j.ID)
}

// tableQuery is what a page of finished jobs from the table is asked for.
type tableQuery struct {
	state, kind, target string // filters ("" any); state is a finished state's name
	schedule            string // filter ("" any): the jobs this schedule made
	after               uint64
	desc                bool
	limit               int
	// skip reports ids the caller has in memory (its copy wins).
	skip func(uint64) bool
}

// matches reports whether finished job j passes q's filters.
func (q *tableQuery) matches(j *state.Job) bool {
	if q.state != "" && j.State.String() != q.state || q.schedule != "" && j.Spec.Schedule != q.schedule {
		return false
	}
	for _, ix := range filterIndexes {
		if v := ix.query(q); v != "" && ix.value(j.Spec) != v {
			return false
		}
	}
	return true
}

// ranges returns the key ranges, per partition, whose entries are the ids
// of the jobs that may pass q, each range in id order: those of the first
// filter index q names, for q's state or for each finished state (kind
// 'f'); else those of the state index (tagState); else the records (tagRecord). It
// reports false if no job can pass.
func (q *tableQuery) ranges(end int64) (prefixes [][]byte, kind byte, ok bool) {
	states := []state.JobState{state.Succeeded, state.Failed, state.Cancelled}
	if q.state != "" {
		st, ok := stateNamed(q.state)
		if !ok || !st.Finished() {
			return nil, 0, false
		}
		states = states[:0]
		states = append(states, st)
	}
	if q.schedule != "" {
		// The sparse schedule index first: a schedule's jobs are few
		// beside all jobs of a state, kind or target.
		return [][]byte{valuePrefix(end, tagSchedule, q.schedule)}, tagSchedule, true
	}
	for _, ix := range filterIndexes {
		if v := ix.query(q); v != "" {
			for _, st := range states {
				prefixes = append(prefixes, append(valuePrefix(end, ix.key, v), byte(st)))
			}
			return prefixes, 'f', true
		}
	}
	if q.state != "" {
		return [][]byte{statePrefix(end, states[0])}, tagState, true
	}
	return [][]byte{append(partPrefix(nil, end), tagRecord)}, tagRecord, true
}

// partCursor walks one range of entries (of an index or the records) of
// one partition in id order.
type partCursor struct {
	end    int64
	it     *pebble.Iterator
	plen   int // the length of the range's prefix before the id
	id     uint64
	valid  bool
	record bool // the range is the records themselves
	filter bool // the range is a filter index's (entries hold entryValue)
}

// load reads the id at the iterator, stepping backwards when desc over
// keys that are not entries of the range.
func (c *partCursor) load(desc bool) {
	c.valid = false
	for c.it.Valid() {
		k := c.it.Key()
		if len(k) == c.plen+8 {
			c.id, c.valid = binary.BigEndian.Uint64(k[c.plen:]), true
			return
		}
		if desc {
			c.it.Prev()
		} else {
			c.it.Next()
		}
	}
}

// list returns up to q.limit finished jobs of the partitions parts that
// pass q, in id order after q.after, skipping the ids q.skip reports. It
// walks the ranges of the index that q.ranges picks in every partition at
// once, merging by id, and checks the filters on each record: a page is
// short only at the end of the matches.
func (t *table) list(q tableQuery, parts []int64) ([]state.Job, error) {
	var curs []*partCursor
	defer func() {
		for _, c := range curs {
			c.it.Close()
		}
	}()
	for _, end := range parts {
		prefixes, kind, ok := q.ranges(end)
		if !ok {
			return nil, nil
		}
		for _, prefix := range prefixes {
			upper := append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
			if err != nil {
				return nil, tableError(t.path, err)
			}
			c := &partCursor{end: end, it: it, plen: len(prefix), record: kind == tagRecord, filter: kind == 'f'}
			curs = append(curs, c)
			switch {
			case q.desc && q.after == 0:
				it.Last()
			case q.desc:
				it.SeekLT(binary.BigEndian.AppendUint64(bytes.Clone(prefix), q.after))
			case q.after == 0:
				it.First()
			default:
				it.SeekGE(binary.BigEndian.AppendUint64(bytes.Clone(prefix), q.after+1))
			}
			c.load(q.desc)
		}
	}
	var out []state.Job
	for len(out) < q.limit {
		var best *partCursor
		for _, c := range curs {
			if c.valid && (best == nil || (c.id > best.id) == q.desc && c.id != best.id) {
				best = c
			}
		}
		if best == nil {
			break
		}
		id := best.id
		var rec []byte
		pass := true
		switch {
		case best.record:
			rec = bytes.Clone(best.it.Value())
		case best.filter:
			pass = q.passesEntry(best.it.Value())
		}
		if q.desc {
			best.it.Prev()
		} else {
			best.it.Next()
		}
		best.load(q.desc)
		if !pass || q.skip != nil && q.skip(id) {
			continue
		}
		if rec == nil {
			var err error
			if rec, err = t.get(recordKey(best.end, id)); err != nil {
				return nil, err
			}
			if rec == nil {
				continue // an index entry whose record a retry just took back
			}
		}
		j, err := state.DecodeJob(rec)
		if err != nil {
			return nil, fmt.Errorf("embedded: the job table %s holds a bad record of job %d: %w; restore the directory from a backup", t.path, id, err)
		}
		if !q.matches(j) {
			continue
		}
		out = append(out, *j)
	}
	for _, c := range curs {
		if err := c.it.Error(); err != nil {
			return nil, tableError(t.path, err)
		}
	}
	return out, nil
}
