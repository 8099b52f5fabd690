package state

// OpDiscard removes the finished job ID for good, at At, before its
// retention ends: the state stops holding and counting it, and its
// idempotency key is free again. Image is the job as it finished (its
// payload left out): what replay needs to uncount a job the state no
// longer holds (evicted to a store's table), and what that store needs to
// delete the job's keys. A job that is not finished, or has an attempt
// still open, is not discarded (see Discardable). (Code 14.)
const OpDiscard Kind = 14

// DiscardVerdict says whether a job may be discarded, and if not, why.
type DiscardVerdict uint8

// The verdicts of Discardable.
const (
	// DiscardOK: the job is finished and none of its attempts is open.
	DiscardOK DiscardVerdict = iota
	// DiscardUnfinished: the job is pending or running; cancel it first.
	DiscardUnfinished
	// DiscardAttemptOpen: the job was cancelled while running and that
	// attempt has not ended yet (its outcome still feeds the breaker).
	DiscardAttemptOpen
)

// Discardable is the rule both stores apply before they discard job j: only
// a finished job whose attempts have all ended.
func Discardable(j *Job) DiscardVerdict {
	switch {
	case !j.State.Finished():
		return DiscardUnfinished
	case j.openAttempt(j.Started()) != nil:
		return DiscardAttemptOpen
	}
	return DiscardOK
}

// DiscardImage returns the image an OpDiscard of j carries: j as it is,
// without its payload (nothing needs it once the job is gone) and with its
// history copied.
func DiscardImage(j *Job) *Job {
	img := j.Clone()
	sp := *j.Spec
	sp.Payload = nil
	img.Spec = &sp
	img.SetSpilled(false)
	img.index = -1
	img.set(flagHeld|flagInDone, false)
	return &img
}

// DiscardApplied reports whether the last op applied was an OpDiscard that
// removed a job.
func (s *State) DiscardApplied() bool { return s.discarded }

// discard applies an OpDiscard and reports whether it removed a job: the
// job the state holds, or else the evicted job op.Image describes, if it
// is still counted in its partition.
func (s *State) discard(op *Op) bool {
	if j := s.job(op.ID); j != nil {
		if s.gone(j) || Discardable(j) != DiscardOK {
			return false
		}
		if !s.uncount(j.Part(), j.State) {
			return false
		}
		j.set(flagInDone, false)
		s.remove(j)
		return true
	}
	img := op.Image
	if img == nil || img.ID != op.ID || img.ID >= s.nextID || !img.State.Finished() || img.Part() <= s.horizon {
		return false
	}
	return s.uncount(img.Part(), img.State)
}

// uncount takes one finished job in state st out of partition part and the
// counts; false if the partition counts none.
func (s *State) uncount(part int64, st JobState) bool {
	c, ok := s.parts[part]
	if !ok {
		return false
	}
	before := c
	c.add(st, -1)
	if c.Succeeded < 0 || c.Failed < 0 || c.Cancelled < 0 || c == before {
		return false
	}
	if c == (Counts{}) {
		delete(s.parts, part)
	} else {
		s.parts[part] = c
	}
	s.counts.add(st, -1)
	return true
}

// appendDiscardImage appends the body of an OpDiscard: its image as a
// snapshot of version 2 holds a job (an op without one, which Encode does
// not validate, gets an image Decode refuses).
func appendDiscardImage(dst []byte, op *Op) []byte {
	img := op.Image
	if img == nil {
		img = &Job{ID: op.ID, Spec: &Spec{}}
	}
	return appendSnapshotJob(dst, img)
}

// discardImage reads the body of an OpDiscard of job id: the image of a
// finished job with that id.
func (d *decoder) discardImage(id uint64) *Job {
	if d.err != nil {
		return nil
	}
	img := d.job(2, nil)
	if d.err == nil && (img.ID != id || !img.State.Finished() || len(img.Spec.Payload) > 0) {
		d.failAt("discard of job %d carries an image of job %d in state %v with %d payload bytes (an image of the finished job, without its payload)", id, img.ID, img.State, len(img.Spec.Payload))
	}
	return img
}
