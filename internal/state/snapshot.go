package state

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/runlog/runlog/retry"
)

// SnapshotVersion is the newest version of the state snapshot bodies this
// build writes and reads: version 3 when the state has sections to write
// (see section), else version 2, so that a state without them is written
// byte for byte as before sections existed. FromSnapshot also reads
// version 1, written before finished jobs could be evicted (every job in
// the body, no partitions): it places each finished job in its partition
// under Config.Retention.
const SnapshotVersion = 3

// sectionsVersion is the first snapshot version with sections.
const sectionsVersion = 3

// section is one snapshot section: state that is neither a job nor a
// breaker (queues, limits, schedules), bounded by configuration, not by
// the jobs. Its body is encoded by the feature that owns it. Tags are
// assigned once and never reused: 1 queues (concurrency, pause), 2 the
// targets' limits and ramps, 3 schedules. FromSnapshot refuses a tag it
// does not know with ErrNewerFormat.
type section struct {
	tag  uint64
	body []byte
}

// sections returns the state's snapshot sections in ascending tag order,
// each encoded now; none when the state has nothing beyond jobs and
// breakers to keep. A feature with state of its own appends its section
// here and reads it in readSection.
func (s *State) sections() []section {
	var secs []section
	if b := s.queueSection(); b != nil {
		secs = append(secs, section{tag: sectionQueues, body: b})
	}
	if sec, ok := s.flowSection(); ok {
		secs = append(secs, sec)
	}
	if len(s.schedules) > 0 {
		secs = append(secs, section{tag: sectionSchedules, body: s.schedulesSection()})
	}
	if b := s.lifeSection(); b != nil {
		secs = append(secs, section{tag: sectionLife, body: b})
	}
	if b := s.paceSection(); b != nil {
		secs = append(secs, section{tag: sectionPaces, body: b})
	}
	return secs
}

// The snapshot section tags.
const (
	sectionQueues    = 1 // queues.go
	sectionSchedules = 3 // schedules.go
	sectionLife      = 4 // lifecycle.go: the targets failing or disabled
)

// readSection reads the body of the section tag into the state.
func (s *State) readSection(tag uint64, d *decoder) {
	switch tag {
	case sectionQueues:
		s.readQueueSection(d)
	case sectionSchedules:
		s.readSchedules(d)
	case sectionLife:
		s.readLifeSection(d)
	case sectionPaces:
		s.readPaceSection(d)
	case sectionFlows:
		s.readFlows(d)
	default:
		d.newer("snapshot section %d, which this build does not know", tag)
	}
}

// appendSections appends the sections part of a version 3 body: uvarint
// n (1 or more), then n times uvarint tag and bytes body, tags ascending.
func appendSections(dst []byte, secs []section) []byte {
	if len(secs) == 0 {
		return dst
	}
	dst = putUvarint(dst, uint64(len(secs)))
	for _, sec := range secs {
		dst = putUvarint(dst, sec.tag)
		dst = putBytes(dst, sec.body)
	}
	return dst
}

// readSections reads the sections part of a version 3 body.
func (s *State) readSections(d *decoder) {
	n := d.uvarint("sections")
	if d.err == nil && (n == 0 || n > uint64(d.left())) {
		d.failAt("%d sections in a version 3 snapshot (it has at least one, each at least 2 bytes)", n)
	}
	last := uint64(0)
	for i := uint64(0); d.err == nil && i < n; i++ {
		tag := d.uvarint("section tag")
		if d.err == nil && tag <= last {
			d.failAt("section tag %d after tag %d", tag, last)
		}
		last = tag
		body := d.raw("section body")
		if d.err != nil {
			return
		}
		sub := &decoder{b: body, base: d.base + d.off - len(body)}
		s.readSection(tag, sub)
		if sub.err == nil && sub.left() != 0 {
			sub.failAt("%d trailing bytes in section %d", sub.left(), tag)
		}
		if sub.err != nil {
			d.err = sub.err
		}
	}
}

// AppendSnapshot appends an encoding of the state (every job it holds with
// its spec and history, the expiry partitions and the retention in force,
// the breakers that are not closed-and-empty, the next id) to dst.
// FromSnapshot reads it back into a state Equal to s. Held jobs are
// written as pending (holding is not state), and a spilled job's payload
// is written empty (the store keeps it). The snapshot file around it
// (checksum, atomic write) is package snapshot's.
//
// The format (integers as in Encode):
//
//	byte     version (2)
//	uvarint  next id
//	         the retention in force as in an expire record (varint
//	         succeeded, cancelled, failed, uvarint n, n times string kind
//	         and the three varints), then byte 1 if it is set, 0 if nil
//	varint   horizon (the time of the last expire)
//	uvarint  partitions, then per partition in ascending order: varint
//	         end, uvarint succeeded, cancelled, failed
//	uvarint  jobs, then per job in ascending id order:
//	         uvarint id, byte state, varint due, first due, enqueued at,
//	         finished at, uvarint fails, uvarint started, string last
//	         error, string reason; the spec as in an enqueue record (string
//	         kind, target, bytes payload, string key, varint attempts, base,
//	         cap, deadline, timeout); uvarint attempts, then per attempt:
//	         uvarint n, varint started at, varint ended at, byte class,
//	         byte ended, string error, bytes output; then varint partition
//	         and byte flags (bit 0: payload spilled, bit 1: the spec's
//	         extension block follows, as in an enqueue record of version 3)
//	uvarint  breakers, then per breaker in target order: string target,
//	         byte state, uvarint fails then each varint, varint until,
//	         uvarint busy
//	         and in version 3 only, the sections (appendSections)
//
// Version 1 is the same without the retention, horizon, partitions, and
// each job's partition and flags.
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
	dst = s.header().append(dst, s.Len())
	for _, j := range s.jobs {
		if j == nil {
			continue
		}
		dst = appendSnapshotJob(dst, j)
		if flush != nil && len(dst) >= snapshotChunk {
			if dst, err = flush(dst); err != nil {
				return dst, err
			}
		}
	}
	dst = appendSnapshotBreakers(dst, s.breakerList())
	return appendSections(dst, s.sections()), nil
}

// snapHeader is what a snapshot body holds before its jobs.
type snapHeader struct {
	nextID    uint64
	retention *Retention
	horizon   int64
	parts     map[int64]Counts
	sections  []section
}

// header returns the state's snapHeader (sharing its retention, copying
// its partitions).
func (s *State) header() snapHeader {
	return snapHeader{nextID: s.nextID, retention: s.retention, horizon: s.horizon, parts: maps.Clone(s.parts), sections: s.sections()}
}

// append appends the header of a body of n jobs.
func (h snapHeader) append(dst []byte, n int) []byte {
	v := byte(sectionsVersion - 1)
	if len(h.sections) > 0 {
		v = sectionsVersion
	}
	dst = append(dst, v)
	dst = putUvarint(dst, h.nextID)
	dst = putRetention(dst, h.retention)
	if h.retention != nil {
		dst = append(dst, 1)
	} else {
		dst = append(dst, 0)
	}
	dst = putVarint(dst, h.horizon)
	ends := slices.Sorted(maps.Keys(h.parts))
	dst = putUvarint(dst, uint64(len(ends)))
	for _, p := range ends {
		c := h.parts[p]
		dst = putVarint(dst, p)
		dst = putUvarint(dst, uint64(c.Succeeded))
		dst = putUvarint(dst, uint64(c.Cancelled))
		dst = putUvarint(dst, uint64(c.Failed))
	}
	return putUvarint(dst, uint64(n))
}

// putRetention appends r (nil as the zero Retention) as an expire record
// holds it.
func putRetention(dst []byte, r *Retention) []byte {
	if r == nil {
		r = &Retention{}
	}
	dst = putVarint(dst, r.SucceededMS)
	dst = putVarint(dst, r.CancelledMS)
	dst = putVarint(dst, r.FailedMS)
	dst = putUvarint(dst, uint64(len(r.PerKind)))
	for _, k := range r.PerKind {
		dst = putString(dst, k.Kind)
		dst = putVarint(dst, k.SucceededMS)
		dst = putVarint(dst, k.CancelledMS)
		dst = putVarint(dst, k.FailedMS)
	}
	return dst
}

// retention reads what putRetention wrote.
func (d *decoder) retention() *Retention {
	r := &Retention{SucceededMS: d.varint("succeeded"), CancelledMS: d.varint("cancelled"), FailedMS: d.varint("failed")}
	n := d.uvarint("kinds")
	if d.err == nil && n > uint64(d.left())/4 {
		d.failAt("%d kinds cannot fit in %d bytes", n, d.left())
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		k := KindRetention{Kind: d.string("kind")}
		k.SucceededMS, k.CancelledMS, k.FailedMS = d.varint("succeeded"), d.varint("cancelled"), d.varint("failed")
		if d.err == nil && i > 0 && r.PerKind[i-1].Kind >= k.Kind {
			d.failAt("kinds not sorted or repeated at %q", k.Kind)
		}
		r.PerKind = append(r.PerKind, k)
	}
	return r
}

// appendSnapshotJob appends one job of a snapshot (version 2).
func appendSnapshotJob(dst []byte, j *Job) []byte {
	dst = appendJobV1(dst, j)
	dst = putVarint(dst, j.Part())
	var flags byte
	if j.Spilled() {
		flags |= jobFlagSpilled
	}
	ext := j.Spec != nil && j.Spec.HasExt()
	if ext {
		flags |= jobFlagSpecExt
	}
	dst = append(dst, flags)
	if ext {
		dst = putSpecExt(dst, j.Spec)
	}
	return dst
}

// The bits of a snapshot job's flags byte.
const (
	// jobFlagSpilled: the job's payload is kept by the store.
	jobFlagSpilled = 1
	// jobFlagSpecExt: the spec's extension block follows the flags.
	jobFlagSpecExt = 2
)

// appendJobV1 appends the fields of a job that version 1 holds.
func appendJobV1(dst []byte, j *Job) []byte {
	dst = putUvarint(dst, j.ID)
	// The JobState's value, frozen: snapshots on disk (and the PostgreSQL
	// store's rows) hold it. TestStoredValuesFrozen pins it.
	dst = append(dst, byte(j.State))
	dst = putVarint(dst, j.Due)
	dst = putVarint(dst, j.FirstDue())
	dst = putVarint(dst, j.EnqueuedAt)
	dst = putVarint(dst, j.FinishedAt())
	dst = putUvarint(dst, uint64(j.Fails()))
	dst = putUvarint(dst, uint64(j.Started()))
	dst = putString(dst, j.LastError())
	dst = putString(dst, j.Reason())
	dst = putSpec(dst, j.Spec)
	dst = putUvarint(dst, uint64(len(j.Attempts())))
	for _, a := range j.Attempts() {
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

// AppendJob appends the encoding of one job as a snapshot holds it (its
// partition and flags included), for a store that keeps finished jobs
// elsewhere; DecodeJob reads it back.
func AppendJob(dst []byte, j *Job) []byte { return appendSnapshotJob(dst, j) }

// DecodeJob reads a job written by AppendJob. It rejects, with an error
// wrapping ErrBadOp, anything AppendJob would not have written, and never
// panics. The job's strings and bytes do not alias b.
func DecodeJob(b []byte) (*Job, error) {
	d := &decoder{b: b}
	j := d.job(2, nil)
	if d.err == nil && d.left() != 0 {
		d.failAt("%d trailing bytes after a job", d.left())
	}
	if d.err != nil {
		return nil, fmt.Errorf("job record: %w", d.err)
	}
	return j, nil
}

// job reads one job of a snapshot body of version v (1 or 2). With a state
// s, its names are s's and its Spec is s's own (ownSpec: shared with other
// jobs when it can be); without, they are the job's own. It checks the
// fields' ranges, not the job's place among others.
func (d *decoder) job(v byte, s *State) *Job {
	var j *Job
	if s != nil {
		j = d.newJob()
	} else {
		j = new(Job)
	}
	j.index = -1
	j.ID = d.uvarint("id")
	st := JobState(d.byte("state"))
	var r Run
	j.Due, r.FirstDue, j.EnqueuedAt, r.FinishedAt = d.varint("due"), d.varint("first due"), d.varint("enqueued at"), d.varint("finished at")
	fails, started := d.uvarint("fails"), d.uvarint("started")
	r.LastError, r.Reason = d.string("last error"), d.string("reason")
	var spec Spec
	sp := &spec
	if s != nil {
		sp.Kind = s.internBytes(d.raw("kind"))
		sp.Target = s.internBytes(d.raw("target"))
	} else {
		sp.Kind = d.string("kind")
		sp.Target = d.string("target")
	}
	sp.Payload = d.bytes("payload")
	sp.Key = d.string("key")
	attempts := d.varint("attempts")
	sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS = d.varint("base"), d.varint("cap"), d.varint("deadline")
	sp.TimeoutMS = d.varint("timeout")
	na := d.uvarint("history")
	if d.err != nil {
		return nil
	}
	switch {
	case st < Pending || st > Cancelled:
		d.failAt("job %d has state %d", j.ID, st)
	case j.ID == 0:
		d.failAt("job id 0")
	case fails > math.MaxInt32 || started > math.MaxUint32 || attempts < math.MinInt32 || attempts > math.MaxInt32:
		d.failAt("job %d: counters out of range", j.ID)
	case na > MaxAttemptHistory:
		d.failAt("job %d: %d attempts in its history, at most %d", j.ID, na, MaxAttemptHistory)
	}
	j.State, r.Fails, r.Started, sp.Policy.Attempts = st, int(fails), uint32(started), int(attempts)
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
		r.Attempts = append(r.Attempts, at)
	}
	if v >= 2 {
		r.Part = d.varint("partition")
		flags := d.byte("flags")
		if d.err == nil && flags&^(jobFlagSpilled|jobFlagSpecExt) != 0 {
			d.newer("job %d: unknown flags %#x", j.ID, flags)
		}
		j.SetSpilled(flags&jobFlagSpilled != 0)
		if flags&jobFlagSpecExt != 0 {
			d.specExt(sp)
		}
		if d.err == nil && (!j.State.Finished() && r.Part != 0 || j.Spilled() && len(sp.Payload) > 0) {
			d.failAt("job %d: partition %d or spilled flag does not fit its state", j.ID, r.Part)
		}
	}
	if d.err != nil {
		return nil
	}
	if !r.zero(j.Due) {
		own := r
		j.Run = &own
	}
	if s != nil {
		j.Spec = s.ownSpec(sp)
	} else {
		j.Spec = new(Spec)
		*j.Spec = spec
	}
	return j
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

// FromSnapshot rebuilds a state from a body written by AppendSnapshot (or
// by a version 1 build). It rejects, with an error wrapping ErrBadOp,
// anything AppendSnapshot would not have written (including a state whose
// invariants, per Check, do not hold), and never panics.
func FromSnapshot(cfg Config, b []byte) (*State, error) {
	return fromSnapshot(cfg, &decoder{b: b})
}

// FromSnapshotReader is FromSnapshot reading the size bytes of a body from
// r as it goes, so that the body and the state it builds are never both in
// memory.
func FromSnapshotReader(cfg Config, r io.Reader, size int) (*State, error) {
	return fromSnapshot(cfg, &decoder{b: make([]byte, 0, 1<<20), r: r, size: size})
}

// SnapshotBodyVersion returns the version byte a snapshot body starts with
// (0 for an empty body).
func SnapshotBodyVersion(first []byte) byte {
	if len(first) == 0 {
		return 0
	}
	return first[0]
}

func fromSnapshot(cfg Config, d *decoder) (*State, error) {
	v := d.byte("version")
	if d.err != nil || v < 1 || v > SnapshotVersion {
		return nil, d.fail("not a state snapshot of version 1 to %d", SnapshotVersion)
	}
	s := New(cfg)
	s.nextID = d.uvarint("next id")
	if v >= 2 {
		r := d.retention()
		if set := d.byte("retention set"); set == 0 {
			if d.err == nil && (r.SucceededMS != 0 || r.CancelledMS != 0 || r.FailedMS != 0 || len(r.PerKind) != 0) {
				d.failAt("no retention set, but retention fields written")
			}
			r = nil
		} else if d.err == nil && set != 1 {
			d.failAt("retention flag %d", set)
		}
		s.retention = r
		s.horizon = d.varint("horizon")
		np := d.uvarint("partitions")
		if d.err == nil && np > uint64(d.left())/4 {
			d.failAt("%d partitions cannot fit in %d bytes", np, d.left())
		}
		prev := int64(math.MinInt64)
		for i := uint64(0); d.err == nil && i < np; i++ {
			p := d.varint("partition end")
			sc, cc, fc := d.uvarint("succeeded"), d.uvarint("cancelled"), d.uvarint("failed")
			if d.err != nil {
				break
			}
			if p <= prev || p <= s.horizon || sc > math.MaxInt32 || cc > math.MaxInt32 || fc > math.MaxInt32 || sc+cc+fc == 0 {
				d.failAt("partition %d: out of order, expired or bad counts", p)
				break
			}
			prev = p
			c := Counts{Succeeded: int(sc), Cancelled: int(cc), Failed: int(fc)}
			s.parts[p] = c
			s.counts.Succeeded += c.Succeeded
			s.counts.Cancelled += c.Cancelled
			s.counts.Failed += c.Failed
		}
	}
	n := d.uvarint("jobs")
	// Each job takes at least 20 bytes: a corrupt count cannot make us
	// allocate beyond the input.
	if d.err == nil && n > uint64(d.left())/20 {
		d.failAt("%d jobs cannot fit in %d bytes", n, d.left())
	}
	if d.err == nil {
		s.jobs = make([]*Job, 0, n)
		d.jobsLeft = n
	}
	for i := uint64(0); d.err == nil && i < n; i++ {
		j := d.job(v, s)
		if d.err != nil {
			break
		}
		sp := j.Spec
		switch {
		case j.ID >= s.nextID || (len(s.jobs) > 0 && s.jobs[len(s.jobs)-1].ID >= j.ID):
			d.failAt("job id %d out of order or not below next id %d", j.ID, s.nextID)
		case sp.Key != "" && s.keys[sp.Key] != 0:
			d.failAt("job %d: key %q held twice", j.ID, sp.Key)
		}
		if d.err != nil {
			break
		}
		s.jobs = append(s.jobs, j)
		if sp.Key != "" {
			s.keys[sp.Key] = j.ID
		}
		switch st := j.State; st {
		case Pending:
			s.count(sp, st, 1)
			s.addPending(j, d.jobsLeft)
		case Running:
			s.count(sp, st, 1)
			j.index = int32(len(s.running))
			s.running = append(s.running, j)
		default:
			if _, ok := s.parts[j.Part()]; v >= 2 && (!ok || j.Part() <= s.horizon) {
				d.failAt("finished job %d in partition %d, which the snapshot does not count (horizon %d)", j.ID, j.Part(), s.horizon)
				break
			}
			if v == 1 {
				s.count(sp, st, 1)
				j.run().Part = PartOf(s.retention, sp.Kind, st, j.FinishedAt())
				c := s.parts[j.Part()]
				c.add(st, 1)
				s.parts[j.Part()] = c
			}
			s.archivable(j)
		}
	}
	if d.err == nil {
		s.orderPending()
		s.indexAll()
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
	if v >= sectionsVersion && d.err == nil {
		s.readSections(d)
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
