package state

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/runlog/runlog/retry"
)

// SnapshotVersion is the version byte that starts a state snapshot body.
const SnapshotVersion = 1

// AppendSnapshot appends an encoding of the whole state (every job with its
// spec and history, the breakers that are not closed-and-empty, the next
// id) to dst. FromSnapshot reads it back into a state Equal to s. Held jobs
// are written as pending (holding is not state). The snapshot file around
// it (checksum, atomic write) is package snapshot's.
//
// The format (integers as in Encode):
//
//	byte     version (1)
//	uvarint  next id
//	uvarint  jobs, then per job in ascending id order:
//	         uvarint id, byte state, varint due, first due, enqueued at,
//	         finished at, uvarint fails, uvarint started, string last
//	         error, string reason; the spec as in an enqueue record (string
//	         kind, target, bytes payload, string key, varint attempts, base,
//	         cap, deadline, timeout); uvarint attempts, then per attempt:
//	         uvarint n, varint started at, varint ended at, byte class,
//	         byte ended, string error, bytes output
//	uvarint  breakers, then per breaker in target order: string target,
//	         byte state, uvarint fails then each varint, varint until,
//	         uvarint busy
func (s *State) AppendSnapshot(dst []byte) []byte {
	dst, _ = s.encodeSnapshot(dst, nil)
	return dst
}

// snapshotChunk is how many encoded bytes WriteSnapshot gathers per write.
const snapshotChunk = 256 << 10

// WriteSnapshot writes the encoding AppendSnapshot returns to w in pieces
// of about snapshotChunk bytes, so that a large state is never encoded
// into memory whole, and returns how many bytes it wrote.
func (s *State) WriteSnapshot(w io.Writer) (int64, error) {
	var n int64
	flush := func(b []byte) ([]byte, error) {
		m, err := w.Write(b)
		n += int64(m)
		return b[:0], err
	}
	dst, err := s.encodeSnapshot(make([]byte, 0, snapshotChunk+64<<10), flush)
	if err == nil && len(dst) > 0 {
		_, err = flush(dst)
	}
	return n, err
}

// encodeSnapshot appends the snapshot to dst, handing it to flush (when
// not nil) each time it holds snapshotChunk bytes or more.
func (s *State) encodeSnapshot(dst []byte, flush func([]byte) ([]byte, error)) ([]byte, error) {
	var err error
	dst = appendSnapshotHeader(dst, s.nextID, len(s.jobs))
	for _, j := range s.jobs {
		dst = appendSnapshotJob(dst, j)
		if flush != nil && len(dst) >= snapshotChunk {
			if dst, err = flush(dst); err != nil {
				return dst, err
			}
		}
	}
	return appendSnapshotBreakers(dst, s.breakerList()), nil
}

// appendSnapshotHeader appends the snapshot's version, next id and job
// count.
func appendSnapshotHeader(dst []byte, nextID uint64, jobs int) []byte {
	dst = append(dst, SnapshotVersion)
	dst = putUvarint(dst, nextID)
	return putUvarint(dst, uint64(jobs))
}

// appendSnapshotJob appends one job of a snapshot.
func appendSnapshotJob(dst []byte, j *Job) []byte {
	dst = putUvarint(dst, j.ID)
	// The JobState's value, frozen: snapshots on disk (and the PostgreSQL
	// store's rows) hold it. TestStoredValuesFrozen pins it.
	dst = append(dst, byte(j.State))
	dst = putVarint(dst, j.Due)
	dst = putVarint(dst, j.FirstDue)
	dst = putVarint(dst, j.EnqueuedAt)
	dst = putVarint(dst, j.FinishedAt)
	dst = putUvarint(dst, uint64(j.Fails))
	dst = putUvarint(dst, uint64(j.Started))
	dst = putString(dst, j.LastError)
	dst = putString(dst, j.Reason)
	dst = putSpec(dst, j.Spec)
	dst = putUvarint(dst, uint64(len(j.Attempts)))
	for _, a := range j.Attempts {
		dst = putUvarint(dst, uint64(a.N))
		dst = putVarint(dst, a.StartedAt)
		dst = putVarint(dst, a.EndedAt)
		ended := byte(0)
		if a.Ended {
			ended = 1
		}
		dst = append(dst, byte(a.Class), ended)
		dst = putString(dst, a.Error)
		dst = putBytes(dst, a.Output)
	}
	return dst
}

// namedBreaker is a breaker with its target.
type namedBreaker struct {
	target string
	b      retry.Breaker
}

// breakerList returns the breakers that are not the zero one, in target
// order, each with its own copy of its failure times.
func (s *State) breakerList() []namedBreaker {
	var out []namedBreaker
	s.Targets(func(t string, b retry.Breaker) bool {
		b.Fails = slices.Clone(b.Fails)
		out = append(out, namedBreaker{t, b})
		return true
	})
	return out
}

// appendSnapshotBreakers appends the breakers section of a snapshot.
func appendSnapshotBreakers(dst []byte, breakers []namedBreaker) []byte {
	dst = putUvarint(dst, uint64(len(breakers)))
	for _, nb := range breakers {
		b := nb.b
		dst = putString(dst, nb.target)
		dst = append(dst, byte(b.State)) // retry.BreakerState, frozen (TestStoredValuesFrozen)
		dst = putUvarint(dst, uint64(len(b.Fails)))
		for _, f := range b.Fails {
			dst = putVarint(dst, f)
		}
		dst = putVarint(dst, b.Until)
		dst = putUvarint(dst, uint64(b.Busy))
	}
	return dst
}

// FromSnapshot rebuilds a state from a body written by AppendSnapshot. It
// rejects, with an error wrapping ErrBadOp, anything AppendSnapshot would
// not have written (including a state whose invariants, per Check, do not
// hold), and never panics.
func FromSnapshot(cfg Config, b []byte) (*State, error) {
	return fromSnapshot(cfg, &decoder{b: b})
}

// FromSnapshotReader is FromSnapshot reading the size bytes of a body from
// r as it goes, so that the body and the state it builds are never both in
// memory.
func FromSnapshotReader(cfg Config, r io.Reader, size int) (*State, error) {
	return fromSnapshot(cfg, &decoder{b: make([]byte, 0, 1<<20), r: r, size: size})
}

func fromSnapshot(cfg Config, d *decoder) (*State, error) {
	if v := d.byte("version"); d.err != nil || v != SnapshotVersion {
		return nil, d.fail("not a state snapshot of version %d", SnapshotVersion)
	}
	s := New(cfg)
	s.nextID = d.uvarint("next id")
	n := d.uvarint("jobs")
	// Each job takes at least 20 bytes: a corrupt count cannot make us
	// allocate beyond the input.
	if d.err == nil && n > uint64(d.left())/20 {
		d.failAt("%d jobs cannot fit in %d bytes", n, d.left())
	}
	if d.err == nil {
		s.jobs = make([]*Job, 0, n)
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		a := &jobAlloc{}
		j := &a.job
		j.Spec = &a.spec
		j.index = -1
		j.ID = d.uvarint("id")
		st := JobState(d.byte("state"))
		j.Due, j.FirstDue, j.EnqueuedAt, j.FinishedAt = d.varint("due"), d.varint("first due"), d.varint("enqueued at"), d.varint("finished at")
		fails, started := d.uvarint("fails"), d.uvarint("started")
		j.LastError, j.Reason = d.string("last error"), d.string("reason")
		sp := &a.spec
		sp.Kind = s.intern(d.string("kind"), &s.lastKind)
		sp.Target = s.intern(d.string("target"), &s.lastTarget)
		sp.Payload = d.bytes("payload")
		sp.Key = d.string("key")
		attempts := d.varint("attempts")
		sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS = d.varint("base"), d.varint("cap"), d.varint("deadline")
		sp.TimeoutMS = d.varint("timeout")
		na := d.uvarint("history")
		if d.err != nil {
			break
		}
		switch {
		case st < Pending || st > Cancelled:
			d.failAt("job %d has state %d", j.ID, st)
		case j.ID == 0 || j.ID >= s.nextID || (len(s.jobs) > 0 && s.jobs[len(s.jobs)-1].ID >= j.ID):
			d.failAt("job id %d out of order or not below next id %d", j.ID, s.nextID)
		case fails > math.MaxInt32 || started > math.MaxUint32 || attempts < math.MinInt32 || attempts > math.MaxInt32:
			d.failAt("job %d: counters out of range", j.ID)
		case na > MaxAttemptHistory:
			d.failAt("job %d: %d attempts in its history, at most %d", j.ID, na, MaxAttemptHistory)
		case sp.Key != "" && s.keys[sp.Key] != 0:
			d.failAt("job %d: key %q held twice", j.ID, sp.Key)
		}
		j.State, j.Fails, j.Started, sp.Policy.Attempts = st, int(fails), uint32(started), int(attempts)
		for k := uint64(0); d.err == nil && k < na; k++ {
			var at Attempt
			n := d.uvarint("attempt n")
			at.StartedAt, at.EndedAt = d.varint("started at"), d.varint("ended at")
			class, ended := d.byte("class"), d.byte("ended")
			at.Error = d.string("attempt error")
			at.Output = d.bytes("output")
			if d.err == nil && (n > math.MaxUint32 || class > byte(retry.Unsafe) || ended > 1) {
				d.failAt("job %d: bad attempt record", j.ID)
			}
			at.N, at.Class, at.Ended = uint32(n), retry.Class(class), ended == 1
			j.Attempts = append(j.Attempts, at)
		}
		if d.err != nil {
			break
		}
		s.jobs = append(s.jobs, j)
		s.count(sp.Target, st, 1)
		if sp.Key != "" {
			s.keys[sp.Key] = j.ID
		}
		switch st {
		case Pending:
			s.heap.push(j)
		case Running:
			j.index = int32(len(s.running))
			s.running = append(s.running, j)
		}
	}
	nb := d.uvarint("breakers")
	prev := ""
	for i := uint64(0); d.err == nil && i < nb; i++ {
		t := d.string("target")
		if d.err == nil && i > 0 && t <= prev {
			d.failAt("breaker targets not in ascending order at %q", t)
		}
		prev = t
		var br retry.Breaker
		br.State = retry.BreakerState(d.byte("breaker state"))
		nf := d.uvarint("breaker fails")
		if d.err == nil && nf > uint64(d.left()) {
			d.failAt("breaker %q: %d failures cannot fit", t, nf)
		}
		for k := uint64(0); d.err == nil && k < nf; k++ {
			br.Fails = append(br.Fails, d.varint("failure time"))
		}
		br.Until = d.varint("until")
		busy := d.uvarint("busy")
		if d.err == nil && (br.State > retry.HalfOpen || busy > math.MaxInt32 || br.IsZero()) {
			d.failAt("breaker %q: bad record", t)
		}
		br.Busy = int(busy)
		if d.err == nil {
			s.breakers[s.intern(t, &s.lastTarget)] = br
		}
	}
	if d.err == nil && d.left() != 0 {
		d.failAt("%d trailing bytes after the snapshot", d.left())
	}
	if d.err != nil {
		return nil, fmt.Errorf("state snapshot: %w", d.err)
	}
	// The checksum around the body rules out damage; this rules out a body
	// that decodes but could not have been written (a bug, or a forgery).
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("state snapshot: %w: %v", ErrBadOp, err)
	}
	return s, nil
}
