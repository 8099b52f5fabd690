package state

import "slices"

// Frozen is a state as it was when Freeze was called, to be encoded as a
// snapshot while ops go on being applied to the live state: the live state
// keeps the first pre-change copy of every job an op changes, so no second
// state is ever built. Freeze, every Apply, AppendJobs and Thaw must be
// serialized by the caller (the embedded store's lock); between two calls
// of AppendJobs the lock may be released.
type Frozen struct {
	jobs     []*Job // the state's jobs at Freeze, ascending by id (nil: a hole)
	n        int    // how many of jobs are not nil
	head     snapHeader
	nextID   uint64
	breakers []namedBreaker
	saved    map[uint64]*Job // pre-change copies of jobs changed since
}

// Freeze returns the state as it is now, for a snapshot (see Frozen). It
// copies the slice of job pointers and the breakers, not the jobs. A state
// is frozen at most once at a time: Thaw before the next Freeze.
func (s *State) Freeze() *Frozen {
	if s.frozen != nil {
		panic("state: Freeze of a frozen state; Thaw first")
	}
	f := &Frozen{
		jobs:     slices.Clone(s.jobs),
		n:        s.Len(),
		head:     s.header(),
		nextID:   s.nextID,
		breakers: s.breakerList(),
		saved:    make(map[uint64]*Job),
	}
	s.frozen = f
	return f
}

// Thaw ends the freeze: the state stops keeping pre-change copies.
func (s *State) Thaw() { s.frozen = nil }

// Len returns how many entries the frozen state's job list has (holes
// included): the range AppendJobs takes.
func (f *Frozen) Len() int { return len(f.jobs) }

// Jobs returns how many jobs the frozen state holds.
func (f *Frozen) Jobs() int { return f.n }

// AppendHeader appends the start of the snapshot body: what
// AppendSnapshot would have written before its first job at Freeze.
func (f *Frozen) AppendHeader(dst []byte) []byte {
	return f.head.append(dst, f.n)
}

// AppendJobs appends jobs [from, to) of the frozen state, each as it was at
// Freeze.
func (f *Frozen) AppendJobs(dst []byte, from, to int) []byte {
	for _, j := range f.jobs[from:to] {
		if j == nil {
			continue
		}
		if old, ok := f.saved[j.ID]; ok {
			j = old
		}
		dst = appendSnapshotJob(dst, j)
	}
	return dst
}

// AppendTrailer appends the end of the snapshot body (the breakers and
// sections at Freeze).
func (f *Frozen) AppendTrailer(dst []byte) []byte {
	return appendSections(appendSnapshotBreakers(dst, f.breakers), f.head.sections)
}

// preserve keeps a copy of job id as it is now, before an op changes it, if
// the frozen state holds it and no copy was kept yet.
func (s *State) preserve(id uint64) {
	f := s.frozen
	if id >= f.nextID {
		return // born after the freeze
	}
	if _, ok := f.saved[id]; ok {
		return
	}
	j := s.job(id)
	if j == nil {
		return
	}
	c := j.Clone() // its Spec is never changed in place (compact.go): shared
	f.saved[id] = &c
}
