package state

import "slices"

// jobHeap is a binary min-heap of pending jobs; each job stores its
// position in index (-1 when in no heap) and the kind of its heap in heap.
// A queue keeps two (see queue): its waiting jobs ordered by (Due, ID), and
// its ready ones, which were due when last looked at, ordered by
// (-Priority, Due, ID); and a bench per held target (holdtarget.go), in the
// ready heap's order.
type jobHeap struct {
	js   []*Job
	kind heapKind
}

// heapKind names the heap a pending job is in.
type heapKind uint8

const (
	inWait  heapKind = iota // a queue's waiting heap, by (Due, ID)
	inReady                 // a queue's ready heap, by (-Priority, Due, ID)
	inBench                 // a held target's bench, by (-Priority, Due, ID)
)

// less orders two pending jobs: by (Due, ID), or, in a ready heap or a
// bench, higher priority first and then by (Due, ID).
func (h *jobHeap) less(a, b *Job) bool {
	if h.kind != inWait && a.Spec.Priority != b.Spec.Priority {
		return a.Spec.Priority > b.Spec.Priority
	}
	return a.Due < b.Due || (a.Due == b.Due && a.ID < b.ID)
}

func (h *jobHeap) push(j *Job) {
	j.index = int32(len(h.js))
	j.setHeap(h.kind)
	h.js = append(h.js, j)
	h.up(int(j.index))
}

// add appends j without restoring the order: a bulk build (a snapshot's
// decode) adds every job and then calls init once, O(n) instead of a push
// per job.
func (h *jobHeap) add(j *Job) {
	j.index = int32(len(h.js))
	j.setHeap(h.kind)
	h.js = append(h.js, j)
}

// init orders the heap after adds, and gives back the room the adds did
// not take if it is most of it.
func (h *jobHeap) init() {
	if cap(h.js) > 2*len(h.js)+64 {
		h.js = slices.Clone(h.js)
	}
	for i := len(h.js)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// pop removes and returns the first job.
func (h *jobHeap) pop() *Job {
	j := h.js[0]
	h.remove(j)
	return j
}

// remove takes j out of the heap; j must be in it.
func (h *jobHeap) remove(j *Job) {
	i, last := int(j.index), len(h.js)-1
	if i != last {
		h.swap(i, last)
	}
	h.js[last] = nil
	h.js = h.js[:last]
	j.index = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the job at i changed its Due.
func (h *jobHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h *jobHeap) swap(i, k int) {
	js := h.js
	js[i], js[k] = js[k], js[i]
	js[i].index = int32(i)
	js[k].index = int32(k)
}

func (h *jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.js[i], h.js[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts the job at i down and reports whether it moved.
func (h *jobHeap) down(i int) bool {
	start, n := i, len(h.js)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h.less(h.js[r], h.js[c]) {
			c = r
		}
		if !h.less(h.js[c], h.js[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
