package state

// pendingHeap is a binary min-heap of pending jobs ordered by (Due, ID);
// each job stores its position in index (-1 when not in the heap).
type pendingHeap []*Job

func less(a, b *Job) bool {
	return a.Due < b.Due || (a.Due == b.Due && a.ID < b.ID)
}

func (h *pendingHeap) push(j *Job) {
	j.index = int32(len(*h))
	*h = append(*h, j)
	h.up(int(j.index))
}

// remove takes j out of the heap; j must be in it.
func (h *pendingHeap) remove(j *Job) {
	i, last := int(j.index), len(*h)-1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	j.index = -1
	if i != last {
		h.fix(i)
	}
}

// fix restores the order after the job at i changed its Due.
func (h *pendingHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

func (h pendingHeap) swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].index = int32(i)
	h[k].index = int32(k)
}

func (h pendingHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !less(h[i], h[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts the job at i down and reports whether it moved.
func (h pendingHeap) down(i int) bool {
	start, n := i, len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && less(h[r], h[c]) {
			c = r
		}
		if !less(h[c], h[i]) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
