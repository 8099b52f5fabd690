package state

import (
	"fmt"
	"slices"
	"strings"

	"github.com/RaduBerinde/btreemap"
)

// The lookups: what a filtered list of the jobs the state holds reads
// instead of a scan of all of them. They follow the jobs the state holds
// (pending, running, and finished ones not yet evicted), so their memory
// follows the live work:
//
//   - kinds and targets: per job kind, and per target, the ids of its
//     jobs, ascending, and how many there are (KindCount, KindScan,
//     TargetCount, TargetScan). While every job the state holds has one
//     kind (one target), that value has no list: the jobs are its list,
//     and a backlog of a million jobs of one kind does not pay for a
//     second million ids. The first job of another value makes the list.
//   - ordered: the idempotency keys of the jobs, in key order (KeyPrefix).
//     The keys map answers a point lookup; this answers a prefix.
//
// They are derived from the jobs, never journaled nor in the snapshot:
// insert, remove and the snapshot's load keep them.

// idList is the ids of the jobs of one value (a kind, a target),
// ascending. A removed job's id stays in place until the next compaction
// (its entry is dead: the state no longer holds a job of this value with
// that id), so that removing one costs O(1); dead entries are at most half
// of the list beyond a few.
type idList struct {
	ids  []uint64
	dead int
}

// idIndex is the ids of the jobs the state holds by one field of their
// Spec (of): a list per value, or none while every job has the same value
// (sole).
type idIndex struct {
	name    string // "kind", "target": for Check's errors
	of      func(*Spec) string
	byValue map[string]*idList
	// sole, when set (hasSole), is the value of every job the state
	// holds; byValue is then empty.
	sole    string
	hasSole bool
	// last caches byValue[lastValue] (nil: nothing cached): runs of one
	// value are common.
	last      *idList
	lastValue string
}

// lookups are the state's lookups (see above).
type lookups struct {
	kinds, targets idIndex
	ordered        *btreemap.BTreeMap[string, uint64]
}

func newLookups() lookups {
	return lookups{
		kinds:   idIndex{name: "kind", of: func(sp *Spec) string { return sp.Kind }, byValue: make(map[string]*idList)},
		targets: idIndex{name: "target", of: func(sp *Spec) string { return sp.Target }, byValue: make(map[string]*idList)},
		ordered: btreemap.New[string, uint64](32, strings.Compare),
	}
}

// added indexes job j, which the state has just come to hold.
func (s *State) added(j *Job) {
	if k := j.Spec.Key; k != "" {
		s.look.ordered.ReplaceOrInsert(k, j.ID)
	}
	s.look.kinds.added(s, j)
	s.look.targets.added(s, j)
}

func (x *idIndex) added(s *State, j *Job) {
	v := x.of(j.Spec)
	switch {
	case x.hasSole && x.sole == v:
		return
	case !x.hasSole && len(x.byValue) == 0:
		x.sole, x.hasSole = v, true
		return
	case x.hasSole:
		x.splitSole(s, j)
	}
	l := x.list(v)
	if n := len(l.ids); n == 0 || l.ids[n-1] < j.ID {
		l.ids = append(l.ids, j.ID) // the usual case: ids come in order
	} else if i, found := slices.BinarySearch(l.ids, j.ID); found {
		l.dead-- // the entry a job of this id and value left
	} else {
		l.ids = slices.Insert(l.ids, i, j.ID)
	}
}

// splitSole gives the sole value its list, as j, of another value, joins
// the jobs: the list holds the ids of every job the state holds but j.
func (x *idIndex) splitSole(s *State, j *Job) {
	l := &idList{ids: make([]uint64, 0, s.Len())}
	for _, o := range s.jobs {
		if o != nil && o != j {
			l.ids = append(l.ids, o.ID)
		}
	}
	x.byValue[x.sole] = l
	x.sole, x.hasSole = "", false
}

// list returns the ids of value v, made if it has none.
func (x *idIndex) list(v string) *idList {
	if x.last != nil && x.lastValue == v {
		return x.last
	}
	l := x.byValue[v]
	if l == nil {
		l = &idList{}
		x.byValue[v] = l
	}
	x.last, x.lastValue = l, v
	return l
}

// indexAll builds the lookups of the jobs the state holds, which it
// indexes for the first time (a snapshot's load).
func (s *State) indexAll() {
	for _, j := range s.jobs {
		if j == nil {
			continue
		}
		if k := j.Spec.Key; k != "" {
			s.look.ordered.ReplaceOrInsert(k, j.ID)
		}
	}
	s.look.kinds.indexAll(s)
	s.look.targets.indexAll(s)
}

// indexAll builds x over the jobs the state holds: each value's ids in
// one allocation of the right size.
func (x *idIndex) indexAll(s *State) {
	n := make(map[string]int)
	for _, j := range s.jobs {
		if j != nil {
			n[x.of(j.Spec)]++
		}
	}
	if len(n) == 1 {
		for v := range n {
			x.sole, x.hasSole = v, true
		}
		return
	}
	for v, c := range n {
		x.byValue[v] = &idList{ids: make([]uint64, 0, c)}
	}
	for _, j := range s.jobs {
		if j != nil {
			x.added(s, j)
		}
	}
}

// removed unindexes job j, which the state no longer holds.
func (s *State) removed(j *Job) {
	if k := j.Spec.Key; k != "" {
		if _, id, ok := s.look.ordered.Get(k); ok && id == j.ID {
			s.look.ordered.Delete(k)
		}
	}
	s.look.kinds.removed(s, j)
	s.look.targets.removed(s, j)
}

func (x *idIndex) removed(s *State, j *Job) {
	if x.hasSole {
		if s.Len() == 0 {
			x.sole, x.hasSole = "", false
		}
		return
	}
	v := x.of(j.Spec)
	l := x.byValue[v]
	if l == nil {
		return
	}
	l.dead++
	switch {
	case l.dead >= len(l.ids):
		delete(x.byValue, v)
		if x.last == l {
			x.last = nil
		}
	case l.dead > 32 && l.dead > len(l.ids)/2:
		l.ids = slices.DeleteFunc(l.ids, func(id uint64) bool { return !x.holds(s, id, v) })
		l.ids = slices.Clip(l.ids)
		l.dead = 0
	}
}

// holds reports whether the state holds job id, of value v.
func (x *idIndex) holds(s *State, id uint64, v string) bool {
	j := s.job(id)
	return j != nil && x.of(j.Spec) == v
}

// count returns how many jobs of value v the state holds.
func (x *idIndex) count(s *State, v string) int {
	if x.hasSole {
		if v == x.sole {
			return s.Len()
		}
		return 0
	}
	l := x.byValue[v]
	if l == nil {
		return 0
	}
	return len(l.ids) - l.dead
}

// scan is Scan over the jobs of value v (see KindScan).
func (x *idIndex) scan(s *State, v string, afterID uint64, desc bool, fn func(*Job) bool) {
	if x.hasSole {
		if v == x.sole {
			s.Scan(afterID, desc, fn)
		}
		return
	}
	l := x.byValue[v]
	if l == nil {
		return
	}
	visit := func(id uint64) bool {
		j := s.job(id)
		if j == nil || x.of(j.Spec) != v || s.gone(j) {
			return true // a dead entry
		}
		return fn(j)
	}
	if desc {
		i := len(l.ids)
		if afterID != 0 {
			i, _ = slices.BinarySearch(l.ids, afterID)
		}
		for i--; i >= 0; i-- {
			if !visit(l.ids[i]) {
				return
			}
		}
		return
	}
	i := 0
	if afterID != 0 {
		i, _ = slices.BinarySearch(l.ids, afterID+1)
	}
	for ; i < len(l.ids); i++ {
		if !visit(l.ids[i]) {
			return
		}
	}
}

// KindCount returns how many jobs of kind the state holds (pending,
// running, and finished ones not yet evicted), in O(1).
func (s *State) KindCount(kind string) int { return s.look.kinds.count(s, kind) }

// KindScan is Scan over the jobs of kind only: it calls fn for them in id
// order until fn returns false, ascending from the first id above afterID,
// or, when desc, descending from the last id below it (afterID 0: from
// the first, or last). It costs O(log n) to find the start, then O(1) per
// job of the kind. fn must not apply ops.
func (s *State) KindScan(kind string, afterID uint64, desc bool, fn func(*Job) bool) {
	s.look.kinds.scan(s, kind, afterID, desc, fn)
}

// TargetCount returns how many jobs of target the state holds (pending,
// running, and finished ones not yet evicted), in O(1).
func (s *State) TargetCount(target string) int { return s.look.targets.count(s, target) }

// TargetScan is KindScan over the jobs of target.
func (s *State) TargetScan(target string, afterID uint64, desc bool, fn func(*Job) bool) {
	s.look.targets.scan(s, target, afterID, desc, fn)
}

// KeyPrefix calls fn, in key order, with each idempotency key that starts
// with prefix among the jobs the state holds, and its job, until fn
// returns false. It costs O(log n) to find the first, then O(1) per key.
func (s *State) KeyPrefix(prefix string, fn func(key string, j *Job) bool) {
	for k, id := range s.look.ordered.Ascend(btreemap.GE(prefix), btreemap.Max[string]()) {
		if !strings.HasPrefix(k, prefix) {
			return
		}
		if j := s.job(id); j != nil && !s.gone(j) && !fn(k, j) {
			return
		}
	}
}

// checkLookups checks that the lookups equal a scan of the jobs: each
// kind's ids strictly ascending, its live entries exactly the jobs of the
// kind the state holds (each held job once: as many live entries as jobs),
// its dead entries counted right, and the ordered keys exactly the keys
// map. It is part of Check, which a snapshot's load runs, so it allocates
// nothing per job.
func (s *State) checkLookups() error {
	for _, x := range []*idIndex{&s.look.kinds, &s.look.targets} {
		if err := x.check(s); err != nil {
			return err
		}
	}
	if n := s.look.ordered.Len(); n != len(s.keys) {
		return fmt.Errorf("%d keys ordered, %d in the key map", n, len(s.keys))
	}
	for k, id := range s.look.ordered.Ascend(btreemap.Min[string](), btreemap.Max[string]()) {
		if s.keys[k] != id {
			return fmt.Errorf("key %q ordered for job %d, mapped to job %d", k, id, s.keys[k])
		}
	}
	return nil
}

// check checks x against a scan of the jobs (checkLookups).
func (x *idIndex) check(s *State) error {
	per := make(map[string]int)
	for _, j := range s.jobs {
		if j != nil {
			per[x.of(j.Spec)]++
		}
	}
	for v, l := range x.byValue {
		live := 0
		for i, id := range l.ids {
			if i > 0 && l.ids[i-1] >= id {
				return fmt.Errorf("%s %q: ids not strictly ascending at %d", x.name, v, id)
			}
			if x.holds(s, id, v) {
				live++
			}
		}
		if live != per[v] || len(l.ids)-l.dead != live || live == 0 {
			return fmt.Errorf("%s %q: %d ids indexed (%d live, %d counted dead), %d jobs held", x.name, v, len(l.ids), live, l.dead, per[v])
		}
	}
	if x.hasSole {
		if len(x.byValue) != 0 || len(per) != 1 || per[x.sole] == 0 {
			return fmt.Errorf("sole %s %q: %d held (%v), %d listed", x.name, x.sole, len(per), per, len(x.byValue))
		}
	} else if len(per) == 1 && len(x.byValue) == 0 {
		return fmt.Errorf("one %s held, no list and no sole %s", x.name, x.name)
	}
	for v, n := range per {
		if x.byValue[v] == nil && !x.hasSole {
			return fmt.Errorf("%s %q: %d jobs held, none indexed", x.name, v, n)
		}
	}
	return nil
}
