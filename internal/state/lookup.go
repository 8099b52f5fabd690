package state

import (
	"fmt"
	"slices"
	"strings"

	"github.com/RaduBerinde/btreemap"
)

// The lookups: what a filtered list of the jobs the state holds reads
// instead of a scan of all of them. Both follow the jobs the state holds
// (pending, running, and finished ones not yet evicted), so their memory
// follows the live work:
//
//   - byKind: per job kind, the ids of its jobs, ascending, and how many
//     there are (KindCount, KindScan). While every job the state holds is
//     of one kind (sole), that kind has no list: the jobs are its list, and
//     a backlog of a million jobs of one kind does not pay for a second
//     million ids. The first job of another kind makes the list.
//   - ordered: the idempotency keys of the jobs, in key order (KeyPrefix).
//     The keys map answers a point lookup; this answers a prefix.
//
// They are derived from the jobs, never journaled nor in the snapshot:
// insert, remove and the snapshot's load keep them.

// kindIDs is the ids of one kind's jobs, ascending. A removed job's id
// stays in place until the next compaction (its entry is dead: the state
// no longer holds a job of this kind with that id), so that removing one
// costs O(1); dead entries are at most half of the list beyond a few.
type kindIDs struct {
	ids  []uint64
	dead int
}

// lookups are the state's lookups (see above).
type lookups struct {
	byKind map[string]*kindIDs
	// sole, when set (hasSole), is the kind of every job the state holds;
	// byKind is then empty.
	sole    string
	hasSole bool
	ordered *btreemap.BTreeMap[string, uint64]
	// last caches byKind[lastKind] (nil: nothing cached): runs of one
	// kind are common.
	last     *kindIDs
	lastKind string
}

func newLookups() lookups {
	return lookups{byKind: make(map[string]*kindIDs), ordered: btreemap.New[string, uint64](32, strings.Compare)}
}

// added indexes job j, which the state has just come to hold.
func (s *State) added(j *Job) {
	if k := j.Spec.Key; k != "" {
		s.look.ordered.ReplaceOrInsert(k, j.ID)
	}
	kind := j.Spec.Kind
	switch {
	case s.look.hasSole && s.look.sole == kind:
		return
	case !s.look.hasSole && len(s.look.byKind) == 0:
		s.look.sole, s.look.hasSole = kind, true
		return
	case s.look.hasSole:
		s.splitSole(j)
	}
	l := s.kindList(kind)
	if n := len(l.ids); n == 0 || l.ids[n-1] < j.ID {
		l.ids = append(l.ids, j.ID) // the usual case: ids come in order
	} else if i, found := slices.BinarySearch(l.ids, j.ID); found {
		l.dead-- // the entry a job of this id and kind left
	} else {
		l.ids = slices.Insert(l.ids, i, j.ID)
	}
}

// splitSole gives the sole kind its list, as j, of another kind, joins
// the jobs: the list holds the ids of every job the state holds but j.
func (s *State) splitSole(j *Job) {
	l := &kindIDs{ids: make([]uint64, 0, s.Len())}
	for _, o := range s.jobs {
		if o != nil && o != j {
			l.ids = append(l.ids, o.ID)
		}
	}
	s.look.byKind[s.look.sole] = l
	s.look.sole, s.look.hasSole = "", false
}

// kindList returns the ids of kind, made if it has none.
func (s *State) kindList(kind string) *kindIDs {
	if s.look.last != nil && s.look.lastKind == kind {
		return s.look.last
	}
	l := s.look.byKind[kind]
	if l == nil {
		l = &kindIDs{}
		s.look.byKind[kind] = l
	}
	s.look.last, s.look.lastKind = l, kind
	return l
}

// indexAll builds the lookups of the jobs the state holds, which it
// indexes for the first time (a snapshot's load): each kind's ids in one
// allocation of the right size.
func (s *State) indexAll() {
	n := make(map[string]int)
	for _, j := range s.jobs {
		if j != nil {
			n[j.Spec.Kind]++
		}
	}
	if len(n) == 1 {
		for kind := range n {
			s.look.sole, s.look.hasSole = kind, true
		}
		for _, j := range s.jobs {
			if k := j.Spec.Key; k != "" {
				s.look.ordered.ReplaceOrInsert(k, j.ID)
			}
		}
		return
	}
	for kind, c := range n {
		s.look.byKind[kind] = &kindIDs{ids: make([]uint64, 0, c)}
	}
	for _, j := range s.jobs {
		if j != nil {
			s.added(j)
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
	kind := j.Spec.Kind
	if s.look.hasSole {
		if s.Len() == 0 {
			s.look.sole, s.look.hasSole = "", false
		}
		return
	}
	l := s.look.byKind[kind]
	if l == nil {
		return
	}
	l.dead++
	switch {
	case l.dead >= len(l.ids):
		delete(s.look.byKind, kind)
		if s.look.last == l {
			s.look.last = nil
		}
	case l.dead > 32 && l.dead > len(l.ids)/2:
		l.ids = slices.DeleteFunc(l.ids, func(id uint64) bool { return !s.holdsOfKind(id, kind) })
		l.ids = slices.Clip(l.ids)
		l.dead = 0
	}
}

// holdsOfKind reports whether the state holds job id, of kind.
func (s *State) holdsOfKind(id uint64, kind string) bool {
	j := s.job(id)
	return j != nil && j.Spec.Kind == kind
}

// KindCount returns how many jobs of kind the state holds (pending,
// running, and finished ones not yet evicted), in O(1).
func (s *State) KindCount(kind string) int {
	if s.look.hasSole {
		if kind == s.look.sole {
			return s.Len()
		}
		return 0
	}
	l := s.look.byKind[kind]
	if l == nil {
		return 0
	}
	return len(l.ids) - l.dead
}

// KindScan is Scan over the jobs of kind only: it calls fn for them in id
// order until fn returns false, ascending from the first id above afterID,
// or, when desc, descending from the last id below it (afterID 0: from
// the first, or last). It costs O(log n) to find the start, then O(1) per
// job of the kind. fn must not apply ops.
func (s *State) KindScan(kind string, afterID uint64, desc bool, fn func(*Job) bool) {
	if s.look.hasSole {
		if kind == s.look.sole {
			s.Scan(afterID, desc, fn)
		}
		return
	}
	l := s.look.byKind[kind]
	if l == nil {
		return
	}
	visit := func(id uint64) bool {
		j := s.job(id)
		if j == nil || j.Spec.Kind != kind || s.gone(j) {
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
	perKind := make(map[string]int)
	for _, j := range s.jobs {
		if j != nil {
			perKind[j.Spec.Kind]++
		}
	}
	for kind, l := range s.look.byKind {
		live := 0
		for i, id := range l.ids {
			if i > 0 && l.ids[i-1] >= id {
				return fmt.Errorf("kind %q: ids not strictly ascending at %d", kind, id)
			}
			if s.holdsOfKind(id, kind) {
				live++
			}
		}
		if live != perKind[kind] || len(l.ids)-l.dead != live || live == 0 {
			return fmt.Errorf("kind %q: %d ids indexed (%d live, %d counted dead), %d jobs held", kind, len(l.ids), live, l.dead, perKind[kind])
		}
	}
	if s.look.hasSole {
		if len(s.look.byKind) != 0 || len(perKind) != 1 || perKind[s.look.sole] == 0 {
			return fmt.Errorf("sole kind %q: %d kinds held (%v), %d listed", s.look.sole, len(perKind), perKind, len(s.look.byKind))
		}
	} else if len(perKind) == 1 && len(s.look.byKind) == 0 {
		return fmt.Errorf("one kind held, no list and no sole kind")
	}
	for kind, n := range perKind {
		if s.look.byKind[kind] == nil && !s.look.hasSole {
			return fmt.Errorf("kind %q: %d jobs held, none indexed", kind, n)
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
