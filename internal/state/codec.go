package state

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/runlog/runlog/retry"
)

// FormatVersion is the version byte that starts every op record this build
// writes but a retry that carries its job's image, which starts with
// ImageFormatVersion. Decode refuses any other.
const FormatVersion = 1

// ImageFormatVersion starts an OpRetry record that carries Op.Image.
const ImageFormatVersion = 2

// ExtFormatVersion starts an OpEnqueue record whose spec has extension
// fields (Spec.HasExt): the spec's extension block follows its version 1
// fields.
const ExtFormatVersion = 3

// lastFormatVersion is the newest record version this build reads.
const lastFormatVersion = ExtFormatVersion

// ErrBadOp is wrapped by every Decode error: the bytes are not an op record
// this build wrote.
var ErrBadOp = errors.New("state: not a runlog op record")

// ErrNewerFormat is wrapped (with ErrBadOp) when a record carries a format
// version this build does not know, most likely written by a newer runlog.
var ErrNewerFormat = errors.New("state: op record format is newer than this build")

// The bits of an outcome op's flags byte.
const (
	// flagBreakerFailed: the attempt counts against the breaker.
	flagBreakerFailed = 1
	// flagHold: a varint HoldUntil (not 0) ends the record.
	flagHold = 2
)

// Encode appends the record of op to dst and returns the extended slice.
//
// The format (version 1; every integer below is a minimal LEB128 varint,
// "uvarint" unsigned, "varint" zig-zag signed; a string or bytes field is
// a uvarint length then that many bytes):
//
//	byte     version (1)
//	byte     kind (1-13)
//	uvarint  id
//	varint   at
//	then by kind:
//	enqueue  varint due, string kind, string target, bytes payload,
//	         string key, varint attempts, varint base, varint cap,
//	         varint deadline, varint timeout, and in version 3 the
//	         spec's extension block (specext.go)
//	start    uvarint attempt
//	succeed, fail, requeue
//	         uvarint attempt, byte class (0-4), byte flags (bit 0:
//	         breaker failed, bit 1: hold), string error, bytes output,
//	         for requeue only: varint due, and with bit 1 only:
//	         varint hold until (not 0)
//	defer    varint due
//	cancel   string reason
//	retry    varint due, and in version 2 the job's image as a snapshot
//	         of version 2 holds a job
//	expire   (id 0) varint succeeded, varint cancelled, varint failed,
//	         uvarint n, then n times: string kind, varint succeeded,
//	         varint cancelled, varint failed
//	queue    (id 0) string name, uvarint concurrency, byte paused (0, 1)
//	snooze   uvarint attempt, varint due
//	schedule (kind 13, id 0) the schedule change (putScheduleChange)
//	target   (kind 16, id 0) string target, byte disable (0, 1), string
//	         reason (putTargetChange)
//	discard  (kind 14) the job's image (Op.Image, without its payload) as
//	         a snapshot of version 2 holds a job
//	limit    (id 0) string target, uvarint rate (thousandths per
//	         second, 0 for none), uvarint burst (0 with rate 0)
//
// Fields a kind does not list are not written. Encode does not validate: an
// op with kind 0 or above OpSnooze, id 0, or an OpEnqueue without a Spec
// (written as an empty Spec) gives a record Decode rejects or reads back
// differently. Every op that Decode returns encodes back to the same bytes.
func Encode(dst []byte, op *Op) []byte {
	v := byte(FormatVersion)
	if op.Kind == OpRetry && op.Image != nil {
		v = ImageFormatVersion
	}
	if op.Kind == OpEnqueue && op.Spec != nil && op.Spec.HasExt() {
		v = ExtFormatVersion
	}
	dst = append(dst, v, byte(op.Kind))
	dst = putUvarint(dst, op.ID)
	dst = putVarint(dst, op.At)
	switch op.Kind {
	case OpEnqueue:
		sp := op.Spec
		if sp == nil {
			sp = &Spec{}
		}
		dst = putVarint(dst, op.Due)
		dst = putSpec(dst, sp)
		if v == ExtFormatVersion {
			dst = putSpecExt(dst, sp)
		}
	case OpStart:
		dst = putUvarint(dst, uint64(op.Attempt))
	case OpSucceed, OpFail, OpRequeue:
		dst = putUvarint(dst, uint64(op.Attempt))
		var flags byte
		if op.BreakerFailed {
			flags |= flagBreakerFailed
		}
		if op.HoldUntil != 0 {
			flags |= flagHold
		}
		dst = append(dst, byte(op.Class), flags)
		dst = putString(dst, op.Error)
		dst = putBytes(dst, op.Output)
		if op.Kind == OpRequeue {
			dst = putVarint(dst, op.Due)
		}
		if op.HoldUntil != 0 {
			dst = putVarint(dst, op.HoldUntil)
		}
	case OpDefer, OpRetry:
		dst = putVarint(dst, op.Due)
		if v == ImageFormatVersion {
			dst = appendSnapshotJob(dst, op.Image)
		}
	case OpCancel:
		dst = putString(dst, op.Error)
	case OpExpire:
		dst = putRetention(dst, op.Retention)
	case OpQueue:
		qs := op.Queue
		if qs == nil {
			qs = &QueueSetting{}
		}
		dst = putQueueSetting(dst, qs)
	case OpSnooze:
		dst = putUvarint(dst, uint64(op.Attempt))
		dst = putVarint(dst, op.Due)
	case OpSchedule:
		dst = putScheduleChange(dst, op.Sched)
	case OpTarget:
		dst = putTargetChange(dst, op.Life)
	case OpDiscard:
		dst = appendDiscardImage(dst, op)
	case OpLimit:
		dst = putString(dst, op.Target)
		dst = putUvarint(dst, uint64(op.Limit.RateMilli))
		dst = putUvarint(dst, uint64(op.Limit.Burst))
	}
	return dst
}

// Decode reads one op record written by Encode. It rejects, with an error
// wrapping ErrBadOp, anything Encode would not have written for a valid op:
// an unknown version (also wrapping ErrNewerFormat) or kind, id 0, a
// non-minimal or overflowing varint, a length past the end, a class or
// flags byte out of range, trailing bytes. It never panics, and it
// allocates no more than a Spec plus the size of b (strings, payload and
// output are copies; the op does not alias b).
func Decode(b []byte) (Op, error) {
	d := decoder{b: b}
	var op Op
	if len(b) < 2 {
		return op, d.fail("a record needs at least 2 bytes, got %d", len(b))
	}
	v := b[0]
	if v < FormatVersion || v > lastFormatVersion {
		if v > lastFormatVersion {
			return op, fmt.Errorf("%w (%w): record format version %d, this build reads versions %d to %d; open this journal with a newer runlog", ErrNewerFormat, ErrBadOp, v, FormatVersion, lastFormatVersion)
		}
		return op, d.fail("unknown record format version %d", v)
	}
	op.Kind = Kind(b[1])
	if v == ImageFormatVersion && op.Kind != OpRetry {
		return Op{}, d.fail("a %v op in a version %d record (only retries carry an image)", op.Kind, v)
	}
	if v == ExtFormatVersion && op.Kind != OpEnqueue {
		return Op{}, d.fail("a %v op in a version %d record (only enqueues carry a spec extension)", op.Kind, v)
	}
	if (op.Kind < OpEnqueue || op.Kind > OpSchedule) && op.Kind != OpDiscard && op.Kind != OpTarget {
		return Op{}, d.fail("unknown op kind %d", b[1])
	}
	d.off = 2
	op.ID = d.uvarint("id")
	op.At = d.varint("at")
	if d.err == nil && (op.ID == 0) != op.Kind.jobless() {
		if op.Kind.jobless() {
			return Op{}, d.fail("%v op with job id %d (it has none)", op.Kind, op.ID)
		}
		return Op{}, d.fail("job id 0 (ids start at 1)")
	}
	switch op.Kind {
	case OpEnqueue:
		op.Due = d.varint("due")
		sp := &Spec{}
		sp.Kind = d.string("job kind")
		sp.Target = d.string("target")
		sp.Payload = d.bytes("payload")
		sp.Key = d.string("key")
		attempts := d.varint("attempts")
		if d.err == nil && (attempts < math.MinInt || attempts > math.MaxInt) {
			d.failAt("attempts %d does not fit an int", attempts)
		}
		sp.Policy.Attempts = int(attempts)
		sp.Policy.BaseMS = d.varint("base")
		sp.Policy.CapMS = d.varint("cap")
		sp.Policy.DeadlineMS = d.varint("deadline")
		sp.TimeoutMS = d.varint("timeout")
		if v == ExtFormatVersion {
			d.specExt(sp)
		}
		op.Spec = sp
	case OpStart:
		op.Attempt = d.attempt()
	case OpSucceed, OpFail, OpRequeue:
		op.Attempt = d.attempt()
		class, flags := d.byte("class"), d.byte("flags")
		if d.err == nil && class > byte(retry.Unsafe) {
			d.failAt("class %d out of range 0-%d", class, retry.Unsafe)
		}
		if d.err == nil && flags&^(flagBreakerFailed|flagHold) != 0 {
			d.failAt("unknown flags %#x", flags)
		}
		op.Class, op.BreakerFailed = retry.Class(class), flags&flagBreakerFailed != 0
		op.Error = d.string("error")
		op.Output = d.bytes("output")
		if op.Kind == OpRequeue {
			op.Due = d.varint("due")
		}
		if flags&flagHold != 0 {
			op.HoldUntil = d.varint("hold until")
			if d.err == nil && op.HoldUntil == 0 {
				d.failAt("hold flag with hold until 0")
			}
		}
	case OpDefer, OpRetry:
		op.Due = d.varint("due")
		if v == ImageFormatVersion && d.err == nil {
			op.Image = d.job(2, nil)
			if d.err == nil && (op.Image.ID != op.ID || !op.Image.State.Finished()) {
				d.failAt("retry of job %d carries an image of job %d in state %v", op.ID, op.Image.ID, op.Image.State)
			}
		}
	case OpCancel:
		op.Error = d.string("reason")
	case OpExpire:
		op.Retention = d.retention()
	case OpQueue:
		qs := d.queueSetting()
		op.Queue = &qs
	case OpSnooze:
		op.Attempt = d.attempt()
		op.Due = d.varint("due")
	case OpSchedule:
		op.Sched = d.scheduleChange()
	case OpTarget:
		op.Life = d.targetChange()
	case OpDiscard:
		op.Image = d.discardImage(op.ID)
	case OpLimit:
		op.Target = d.string("target")
		rate, burst := d.uvarint("rate"), d.uvarint("burst")
		if d.err == nil && (rate > retry.MaxRateMilli || burst > retry.MaxBurst) {
			d.failAt("limit of %q out of range", op.Target)
		}
		op.Limit = retry.Limit{RateMilli: int64(rate), Burst: int(burst)}
		if d.err == nil && op.Limit.Validate() != nil {
			d.failAt("limit of %q: %v", op.Target, op.Limit.Validate())
		}
	}
	if d.err == nil && d.off != len(b) {
		d.failAt("%d trailing bytes after a %v op", len(b)-d.off, op.Kind)
	}
	if d.err != nil {
		return Op{}, d.err
	}
	return op, nil
}

// decoder reads fields from b at off; after the first error every read
// returns a zero value and err keeps that first error. With r set it
// streams: b is a window that avail refills from r, base is the offset of
// b[0] in the whole input and size the whole input's length.
type decoder struct {
	b   []byte
	off int
	err error

	r    io.Reader
	base int
	size int

	// chunk is where a snapshot's decode takes its jobs from (newJob);
	// jobsLeft is how many more jobs the snapshot says it holds.
	chunk    []Job
	jobsLeft uint64
}

// jobChunk is how many jobs a snapshot's decode allocates at once: one
// allocation per jobChunk jobs, not one per job. A chunk stays while any
// of its jobs does, which bounds what it can keep by the snapshot's size.
const jobChunk = 4096

// newJob returns a zero Job from the decoder's chunk.
func (d *decoder) newJob() *Job {
	if len(d.chunk) == 0 {
		d.chunk = make([]Job, min(jobChunk, max(d.jobsLeft, 1)))
	}
	d.jobsLeft = max(d.jobsLeft, 1) - 1
	j := &d.chunk[0]
	d.chunk = d.chunk[1:]
	return j
}

// left returns how many bytes of the input follow off.
func (d *decoder) left() int {
	if d.r == nil {
		return len(d.b) - d.off
	}
	return d.size - d.base - d.off
}

// avail reports whether n bytes follow off, reading them into the window
// when streaming.
func (d *decoder) avail(n uint64) bool {
	if uint64(len(d.b)-d.off) >= n {
		return true
	}
	if d.r == nil || n > uint64(d.left()) {
		return false
	}
	rest := copy(d.b, d.b[d.off:])
	d.b, d.base, d.off = d.b[:rest], d.base+d.off, 0
	need := int(n)
	if cap(d.b) < need {
		nb := make([]byte, rest, max(need, 2*cap(d.b)))
		copy(nb, d.b)
		d.b = nb
	}
	for len(d.b) < need {
		m, err := d.r.Read(d.b[len(d.b):cap(d.b)])
		d.b = d.b[:len(d.b)+m]
		if err != nil && len(d.b) < need {
			d.failAt("read: %v", err)
			return false
		}
	}
	return true
}

func (d *decoder) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadOp, fmt.Sprintf(format, args...))
}

func (d *decoder) failAt(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", ErrBadOp, fmt.Sprintf(format, args...), d.base+d.off)
	}
}

// newer records, once, an error wrapping ErrNewerFormat and ErrBadOp: the
// input holds something a newer runlog writes.
func (d *decoder) newer(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w (%w): %s at byte %d; open this journal with a newer runlog", ErrNewerFormat, ErrBadOp, fmt.Sprintf(format, args...), d.base+d.off)
	}
}

// uvarint reads a minimal LEB128 unsigned varint of at most 64 bits.
func (d *decoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	var x uint64
	for i := 0; ; i++ {
		if !d.avail(uint64(i + 1)) {
			d.failAt("%s: varint runs past the end", field)
			return 0
		}
		c := d.b[d.off+i]
		if i == 9 && c > 1 {
			d.failAt("%s: varint overflows 64 bits", field)
			return 0
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				d.failAt("%s: non-minimal varint", field)
				return 0
			}
			d.off += i + 1
			return x
		}
	}
}

func (d *decoder) varint(field string) int64 {
	u := d.uvarint(field)
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) attempt() uint32 {
	n := d.uvarint("attempt")
	if n > math.MaxUint32 {
		d.failAt("attempt %d does not fit 32 bits", n)
		return 0
	}
	return uint32(n)
}

func (d *decoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if !d.avail(1) {
		d.failAt("%s: missing", field)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// raw reads a length-prefixed field, bounded by the bytes left. When
// streaming, the slice is valid until the next read.
func (d *decoder) raw(field string) []byte {
	n := d.uvarint(field)
	if d.err != nil {
		return nil
	}
	if !d.avail(n) {
		if d.err == nil {
			d.failAt("%s: length %d but only %d bytes left", field, n, d.left())
		}
		return nil
	}
	p := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return p
}

func (d *decoder) string(field string) string { return string(d.raw(field)) }

func (d *decoder) bytes(field string) []byte {
	p := d.raw(field)
	if len(p) == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

// putSpec appends a job's spec: kind, target, payload, key, the policy and
// the timeout (the layout an enqueue record and a snapshot share).
func putSpec(dst []byte, sp *Spec) []byte {
	dst = putString(dst, sp.Kind)
	dst = putString(dst, sp.Target)
	dst = putBytes(dst, sp.Payload)
	dst = putString(dst, sp.Key)
	dst = putVarint(dst, int64(sp.Policy.Attempts))
	dst = putVarint(dst, sp.Policy.BaseMS)
	dst = putVarint(dst, sp.Policy.CapMS)
	dst = putVarint(dst, sp.Policy.DeadlineMS)
	return putVarint(dst, sp.TimeoutMS)
}

func putUvarint(dst []byte, x uint64) []byte {
	for x >= 0x80 {
		dst = append(dst, byte(x)|0x80)
		x >>= 7
	}
	return append(dst, byte(x))
}

func putVarint(dst []byte, x int64) []byte {
	return putUvarint(dst, uint64(x<<1)^uint64(x>>63))
}

func putString(dst []byte, s string) []byte {
	dst = putUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func putBytes(dst []byte, p []byte) []byte {
	dst = putUvarint(dst, uint64(len(p)))
	return append(dst, p...)
}
