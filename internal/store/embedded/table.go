package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
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
//	"p" end "k" len kind id         index by kind (len: uvarint)
//	"p" end "t" len target id       index by target
//	"p" end "c" len schedule id     index by schedule (jobs a schedule made)
//	"p" end "y" key                 idempotency key → id
//
// Every key of a finished job lies under its expiry partition's prefix, so
// that expiry is one range deletion of the partitions that ended.
type table struct {
	db   *pebble.DB
	path string

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

// tableVersion is the table format this build writes ("mversion").
const tableVersion = 1

// tableDir is the table's subdirectory in a store's directory.
const tableDir = "table"

// tableOptions are the pebble options of a table on fsys.
func tableOptions(fsys pebblevfs.FS, logf func(string, ...any), readOnly bool) (*pebble.Options, interface{ Unref() }) {
	cache := pebble.NewCache(32 << 20)
	o := &pebble.Options{
		FS:           fsys,
		Cache:        cache,
		DisableWAL:   true,
		MemTableSize: 32 << 20,
		ReadOnly:     readOnly,
		Logger:       pebbleLogger{logf},
	}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
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
	t := &table{path: path, failed: make(chan struct{})}
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
	case len(v) != 1 || v[0] != tableVersion:
		db.Close()
		return nil, fmt.Errorf("embedded: the job table %s has format %v, this build reads format %d: open it with the runlog that wrote it", path, v, tableVersion)
	}
	return t, nil
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
	k := append(partPrefix(make([]byte, 0, 18), end), 'r')
	return binary.BigEndian.AppendUint64(k, id)
}

// indexPrefix is the prefix of the entries of index ix (one of 's', 'k',
// 't', 'c') for value v in partition end; an entry appends the id.
func indexPrefix(end int64, ix byte, v string) []byte {
	k := append(partPrefix(make([]byte, 0, 20+len(v)), end), ix)
	if ix == 's' {
		return append(k, v...)
	}
	k = binary.AppendUvarint(k, uint64(len(v)))
	return append(k, v...)
}

func keyKey(end int64, key string) []byte {
	k := append(partPrefix(make([]byte, 0, 10+len(key)), end), 'y')
	return append(k, key...)
}

func stateValue(st state.JobState) string { return string([]byte{byte(st)}) }

// stateNamed returns the state whose String is name.
func stateNamed(name string) (state.JobState, bool) {
	for st := state.Pending; st <= state.Cancelled; st++ {
		if st.String() == name {
			return st, true
		}
	}
	return 0, false
}

// putFinished adds to b the keys of finished job j, whose payload is
// payload, and, when spilled says the table may hold it apart, deletes its
// spilled payload.
func putFinished(b *pebble.Batch, j *state.Job, payload []byte, spilled bool) {
	c := *j
	sp := *j.Spec
	sp.Payload = payload
	c.Spec, c.Spilled = &sp, false
	rec := state.AppendJob(nil, &c)
	b.Set(recordKey(j.Part, j.ID), rec, nil)
	for _, k := range indexKeys(j) {
		b.Set(k, nil, nil)
	}
	if sp.Key != "" {
		b.Set(keyKey(j.Part, sp.Key), binary.BigEndian.AppendUint64(nil, j.ID), nil)
	}
	if spilled {
		b.Delete(payloadKey(j.ID), nil)
	}
}

// deleteFinished adds to b the deletion of every key finished job j (as
// an image) has in its partition.
func deleteFinished(b *pebble.Batch, j *state.Job) {
	b.Delete(recordKey(j.Part, j.ID), nil)
	for _, k := range indexKeys(j) {
		b.Delete(k, nil)
	}
	if j.Spec.Key != "" {
		b.Delete(keyKey(j.Part, j.Spec.Key), nil)
	}
}

// indexKeys returns the index entries of finished job j.
func indexKeys(j *state.Job) [][]byte {
	id := func(k []byte) []byte { return binary.BigEndian.AppendUint64(k, j.ID) }
	keys := [][]byte{
		id(indexPrefix(j.Part, 's', stateValue(j.State))),
		id(indexPrefix(j.Part, 'k', j.Spec.Kind)),
		id(indexPrefix(j.Part, 't', j.Spec.Target)),
	}
	if j.Spec.Schedule != "" {
		keys = append(keys, id(indexPrefix(j.Part, 'c', j.Spec.Schedule)))
	}
	return keys
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

// byKeyPrefix returns the finished jobs in parts whose key starts with
// prefix, in no order; a prefix that more than maxSearch keys start with
// is refused.
func (t *table) byKeyPrefix(prefix string, parts []int64) ([]keyHit, error) {
	var ids []keyHit
	for _, end := range parts {
		lo := keyKey(end, prefix)
		hi := append(partPrefix(nil, end), 'y'+1)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, tableError(t.path, err)
		}
		for it.First(); it.Valid() && bytes.HasPrefix(it.Key(), lo); it.Next() {
			if v := it.Value(); len(v) == 8 {
				ids = append(ids, keyHit{id: binary.BigEndian.Uint64(v), part: end})
			}
			if len(ids) > maxSearch {
				it.Close()
				return nil, fmt.Errorf("embedded: more than %d finished jobs have a key that starts with %q: search for a longer prefix", maxSearch, prefix)
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
		rec, err := t.get(recordKey(j.Part, j.ID))
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

// partCursor walks one partition's entries of one index in id order.
type partCursor struct {
	end    int64
	it     *pebble.Iterator
	plen   int // the length of the index prefix before the id
	id     uint64
	valid  bool
	record bool // the index is the records themselves
}

func (c *partCursor) load() {
	c.valid = false
	for c.it.Valid() {
		k := c.it.Key()
		if len(k) == c.plen+8 {
			c.id, c.valid = binary.BigEndian.Uint64(k[c.plen:]), true
			return
		}
		c.it.Next() // not an entry of this index (a longer value)
	}
}

// list returns up to q.limit finished jobs of the partitions parts that
// pass q, in id order after q.after, skipping the ids q.skip reports. It
// walks the most selective index the query names (state, then target,
// then kind, else the records) in every partition at once, merging by id,
// and checks the other filters on each record: a page is short only at the
// end of the matches.
func (t *table) list(q tableQuery, parts []int64) ([]state.Job, error) {
	ix, v := byte('r'), ""
	switch {
	case q.schedule != "":
		ix, v = 'c', q.schedule
	case q.state != "":
		st, ok := stateNamed(q.state)
		if !ok || !st.Finished() {
			return nil, nil
		}
		ix, v = 's', stateValue(st)
	case q.target != "":
		ix, v = 't', q.target
	case q.kind != "":
		ix, v = 'k', q.kind
	}
	curs := make([]*partCursor, 0, len(parts))
	defer func() {
		for _, c := range curs {
			c.it.Close()
		}
	}()
	for _, end := range parts {
		var prefix []byte
		if ix == 'r' {
			prefix = append(partPrefix(nil, end), 'r')
		} else {
			prefix = indexPrefix(end, ix, v)
		}
		upper := append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		it, err := t.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
		if err != nil {
			return nil, tableError(t.path, err)
		}
		c := &partCursor{end: end, it: it, plen: len(prefix), record: ix == 'r'}
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
		c.loadDir(q.desc)
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
		if best.record {
			rec = bytes.Clone(best.it.Value())
		}
		if q.desc {
			best.it.Prev()
		} else {
			best.it.Next()
		}
		best.loadDir(q.desc)
		if q.skip != nil && q.skip(id) {
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
		if (q.state != "" && j.State.String() != q.state) || (q.kind != "" && j.Spec.Kind != q.kind) || (q.target != "" && j.Spec.Target != q.target) || (q.schedule != "" && j.Spec.Schedule != q.schedule) {
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

// loadDir is load, stepping backwards when desc.
func (c *partCursor) loadDir(desc bool) {
	if !desc {
		c.load()
		return
	}
	c.valid = false
	for c.it.Valid() {
		k := c.it.Key()
		if len(k) == c.plen+8 {
			c.id, c.valid = binary.BigEndian.Uint64(k[c.plen:]), true
			return
		}
		c.it.Prev()
	}
}
