package state

import "github.com/runlog/runlog/retry"

// Pace is a rate limit's state: its token bucket (GCRA, retry.Bucket) and
// its reservation horizon. It is the one rule of both scopes of a rate
// limit: a target's (Flow's Bucket and Reserved, docs/semantics.md §4a)
// and a queue's (queuepace.go). The zero Pace is a full bucket with no
// reservation.
type Pace struct {
	// Bucket is the token bucket, advanced by every start under the limit.
	Bucket retry.Bucket
	// Reserved is, in µs, the latest start time promised to a job that the
	// limit deferred (0 for none): the next one is deferred at least one
	// interval later, so that a backlog is spread over the bucket's future
	// tokens instead of coming due all at once again.
	Reserved int64
}

// Admit decides, for a job under limit lim at now (ms), whether the bucket
// has a token; if not, it returns the next free slot: the later of the
// bucket's next token and Reserved + one interval, rounded up to the ms,
// at least now + 1. The zero limit admits every job.
func (p Pace) Admit(lim retry.Limit, now int64) (bool, int64) {
	if p.Bucket.Admits(lim, now) {
		return true, 0
	}
	slot := micros(p.Bucket.NextAdmit(lim, now))
	if p.Reserved != 0 {
		slot = max(slot, addSat(p.Reserved, lim.Interval()))
	}
	due := slot / 1000
	if slot%1000 != 0 {
		due++
	}
	return false, max(due, addSat(now, 1))
}

// Take returns p after a start at at (ms) under lim: the bucket gives a
// token (retry.Bucket.Take), whether or not it had one.
func (p Pace) Take(lim retry.Limit, at int64) Pace {
	p.Bucket = p.Bucket.Take(lim, at)
	return p
}

// Reserve returns p after a job under lim was deferred at at (ms) to due
// (ms): Reserved = max(Reserved + interval, the bucket's next token,
// due − 999 µs), the slot promised to that job.
func (p Pace) Reserve(lim retry.Limit, at, due int64) Pace {
	r := max(micros(p.Bucket.NextAdmit(lim, at)), micros(due)-999)
	if p.Reserved != 0 {
		r = max(r, addSat(p.Reserved, lim.Interval()))
	}
	p.Reserved = r
	return p
}

// Settle returns p with what has run out at now (ms) dropped: a
// reservation at or before now, a bucket full at now (equal to the zero
// one).
func (p Pace) Settle(now int64) Pace {
	if p.Reserved <= micros(now) {
		p.Reserved = 0
	}
	if p.Bucket.Full(now) {
		p.Bucket = retry.Bucket{}
	}
	return p
}
