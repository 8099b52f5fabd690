package state

import "math"

// The spec's extension block: the Spec fields added after format version 1
// (Queue, Priority, Schedule, Tick). A spec whose extension fields are all
// zero is encoded without a block, byte for byte as before they existed;
// one with any set carries the block after the version 1 fields (an
// enqueue record of version ExtFormatVersion; a job record whose flags have
// jobFlagSpecExt set).
//
// The block (integers as in Encode):
//
//	uvarint  n, the number of fields that follow (1 or more)
//	n times: uvarint tag, then the field's value by tag:
//	         1 queue     string (not empty)
//	         2 priority  varint (not 0, within int32)
//	         3 schedule  string (not empty)
//	         4 tick      varint (not 0)
//	         8 metadata  uvarint m (1 or more), then m times string key,
//	                     string value; keys not empty, strictly ascending
//	         9 replay of uvarint (not 0)
//
// Tags are strictly ascending and a field is written only when it is not
// zero, so every spec has exactly one encoding. A tag this build does not
// know is refused with ErrNewerFormat: a newer runlog wrote it.
const (
	extQueue    = 1
	extPriority = 2
	extSchedule = 3
	extTick     = 4
	extMetadata = 8
	extReplayOf = 9
	extLastTag  = extReplayOf
)

// putSpecExt appends the extension block of sp, which must have HasExt.
func putSpecExt(dst []byte, sp *Spec) []byte {
	n := 0
	if sp.Queue != "" {
		n++
	}
	if sp.Priority != 0 {
		n++
	}
	if sp.Schedule != "" {
		n++
	}
	if sp.Tick != 0 {
		n++
	}
	if len(sp.Metadata) > 0 {
		n++
	}
	if sp.ReplayOf != 0 {
		n++
	}
	dst = putUvarint(dst, uint64(n))
	if sp.Queue != "" {
		dst = putString(putUvarint(dst, extQueue), sp.Queue)
	}
	if sp.Priority != 0 {
		dst = putVarint(putUvarint(dst, extPriority), int64(sp.Priority))
	}
	if sp.Schedule != "" {
		dst = putString(putUvarint(dst, extSchedule), sp.Schedule)
	}
	if sp.Tick != 0 {
		dst = putVarint(putUvarint(dst, extTick), sp.Tick)
	}
	if len(sp.Metadata) > 0 {
		dst = putUvarint(putUvarint(dst, extMetadata), uint64(len(sp.Metadata)))
		for _, m := range sp.Metadata {
			dst = putString(putString(dst, m.Key), m.Value)
		}
	}
	if sp.ReplayOf != 0 {
		dst = putUvarint(putUvarint(dst, extReplayOf), sp.ReplayOf)
	}
	return dst
}

// specExt reads an extension block into sp, refusing what putSpecExt would
// not have written.
func (d *decoder) specExt(sp *Spec) {
	n := d.uvarint("extension fields")
	if d.err == nil && (n == 0 || n > extLastTag+1) {
		if n > extLastTag+1 {
			d.newer("%d spec extension fields; this build knows %d", n, extLastTag)
			return
		}
		d.failAt("an empty spec extension block")
		return
	}
	last := uint64(0)
	for i := uint64(0); d.err == nil && i < n; i++ {
		tag := d.uvarint("extension tag")
		if d.err != nil {
			return
		}
		if tag <= last {
			d.failAt("spec extension tag %d after tag %d", tag, last)
			return
		}
		last = tag
		switch tag {
		case extQueue:
			if sp.Queue = d.string("queue"); d.err == nil && sp.Queue == "" {
				d.failAt("empty queue written")
			}
		case extPriority:
			p := d.varint("priority")
			if d.err == nil && (p == 0 || p < math.MinInt32 || p > math.MaxInt32) {
				d.failAt("priority %d is 0 or out of range", p)
			}
			sp.Priority = int32(p)
		case extSchedule:
			if sp.Schedule = d.string("schedule"); d.err == nil && sp.Schedule == "" {
				d.failAt("empty schedule written")
			}
		case extTick:
			if sp.Tick = d.varint("tick"); d.err == nil && sp.Tick == 0 {
				d.failAt("tick 0 written")
			}
		case extMetadata:
			sp.Metadata = d.metadata()
		case extReplayOf:
			if sp.ReplayOf = d.uvarint("replay of"); d.err == nil && sp.ReplayOf == 0 {
				d.failAt("replay of job 0 written")
			}
		default:
			d.newer("spec extension tag %d; this build knows tags 1-%d", tag, extLastTag)
		}
	}
}

// metadata reads the entries of a metadata field.
func (d *decoder) metadata() []Meta {
	m := d.uvarint("metadata entries")
	// Each entry takes at least 3 bytes: a corrupt count cannot make us
	// allocate beyond the input.
	if d.err == nil && (m == 0 || m > uint64(d.left())/3) {
		d.failAt("%d metadata entries (1 or more, each at least 3 bytes)", m)
	}
	if d.err != nil {
		return nil
	}
	out := make([]Meta, 0, m)
	prev := ""
	for i := uint64(0); d.err == nil && i < m; i++ {
		k, v := d.string("metadata key"), d.string("metadata value")
		if d.err == nil && k <= prev {
			d.failAt("metadata key %q is empty or not after %q", k, prev)
		}
		out = append(out, Meta{k, v})
		prev = k
	}
	return out
}
