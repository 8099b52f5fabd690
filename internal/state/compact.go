package state

import (
	"hash/maphash"

	"github.com/runlog/runlog/retry"
)

// The pending tier is kept compact (docs/snapshots.md, "Two tiers"): a
// million jobs waiting must not cost a million copies of what they have in
// common. A job's Job and its Spec are separate allocations, so that a
// Spec can be dropped or shared while its job stays; jobs whose Spec holds
// nothing of their own (no payload in memory, no key, no metadata, no
// schedule tick, not a replay) share one Spec per (kind, target, queue,
// priority, policy, timeout) from a small table. Sharing is invisible to
// the rules: Specs are never changed in place, so a shared one is read
// exactly as a private copy would be, and replay, which may share
// differently, equals live.

// sharedSlots is the size of the table of shared Specs. It is bounded, not
// a map that grows with every kind and target ever seen: a Spec that loses
// its slot to another stays shared by the jobs that point to it, and the
// next one is shared anew.
const sharedSlots = 256

// sharedSpecs is a state's table of shared Specs.
type sharedSpecs struct {
	seed  maphash.Seed
	slots [sharedSlots]*Spec
	last  *Spec // the last one handed out: runs of one kind of job are common
}

// sharedKey is what shared specs differ in.
type sharedKey struct {
	kind, target, queue string
	priority            int32
	policy              retry.Policy
	timeout             int64
}

// shareable reports whether sp holds nothing of its own job: only then may
// jobs share it.
func shareable(sp *Spec) bool {
	return len(sp.Payload) == 0 && sp.Key == "" && len(sp.Metadata) == 0 && sp.Schedule == "" && sp.Tick == 0 && sp.ReplayOf == 0
}

// sameShared reports whether shareable specs a and b are equal.
func sameShared(a, b *Spec) bool {
	return a.Kind == b.Kind && a.Target == b.Target && a.Queue == b.Queue && a.Priority == b.Priority &&
		a.Policy == b.Policy && a.TimeoutMS == b.TimeoutMS
}

// ownSpec returns the state's own Spec equal to sp (which it does not
// keep; sp's Payload and Metadata are shared, not copied): a shared one if
// sp is shareable, else a new copy, with its names interned.
func (s *State) ownSpec(sp *Spec) *Spec {
	if shareable(sp) {
		return s.shareSpec(sp)
	}
	c := new(Spec)
	*c = *sp
	s.internSpec(c)
	return c
}

// internSpec makes sp's kind, target and queue the state's copies.
func (s *State) internSpec(sp *Spec) {
	sp.Kind = s.intern(sp.Kind, &s.lastKind)
	sp.Target = s.intern(sp.Target, &s.lastTarget)
	if sp.Queue != "" {
		sp.Queue = s.intern(sp.Queue, &s.lastQueue)
	}
}

// shareSpec returns the shared Spec equal to shareable sp, making one if
// the table holds none.
func (s *State) shareSpec(sp *Spec) *Spec {
	t := &s.shared
	if t.last != nil && sameShared(t.last, sp) {
		return t.last
	}
	k := sharedKey{sp.Kind, sp.Target, sp.Queue, sp.Priority, sp.Policy, sp.TimeoutMS}
	slot := &t.slots[maphash.Comparable(t.seed, k)%sharedSlots]
	if c := *slot; c != nil && sameShared(c, sp) {
		t.last = c
		return c
	}
	c := new(Spec)
	*c = *sp
	s.internSpec(c)
	*slot, t.last = c, c
	return c
}

// withoutPayload returns the state's own Spec equal to sp but with no
// payload (for SpillPayload).
func (s *State) withoutPayload(sp *Spec) *Spec {
	c := *sp
	c.Payload = nil
	return s.ownSpec(&c)
}

// internBytes returns the state's copy of the name b spells, allocating
// only for a name it does not hold (a snapshot's decode: a million jobs
// name a handful of kinds and targets).
func (s *State) internBytes(b []byte) string {
	return s.names.internBytes(b)
}

// nameSlots is the size of a state's table of interned names.
const nameSlots = 4096

// nameTable interns the kind, target and queue names of jobs. It is a
// fixed table, not a map: a map would grow with every name ever seen,
// which a stream of jobs with distinct targets (one per tenant, or per
// URL) makes the history. A name that loses its slot to another is still
// shared by the jobs that hold it; the next one is interned anew.
type nameTable struct {
	seed  maphash.Seed
	slots [nameSlots]string
}

func newNameTable() *nameTable {
	return &nameTable{seed: maphash.MakeSeed()}
}

// intern returns the table's copy of name, keeping name as the copy if it
// holds none.
func (t *nameTable) intern(name string) string {
	slot := &t.slots[maphash.String(t.seed, name)%nameSlots]
	if *slot != name {
		*slot = name
	}
	return *slot
}

// internBytes returns the table's copy of the name b spells, allocating
// only if it holds none.
func (t *nameTable) internBytes(b []byte) string {
	slot := &t.slots[maphash.Bytes(t.seed, b)%nameSlots]
	if *slot != string(b) {
		*slot = string(b)
	}
	return *slot
}
