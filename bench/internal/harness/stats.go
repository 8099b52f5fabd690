package harness

import (
	"slices"
	"sync/atomic"
	"time"
)

// Percentile returns the q-quantile (0 <= q <= 1) of sorted by the
// nearest-rank method, or 0 for an empty slice.
func Percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	switch {
	case q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[len(sorted)-1]
	}
	// Nearest rank: the smallest value with at least q of the samples at
	// or below it.
	rank := int(q*float64(len(sorted)) + 0.999999999)
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Rate returns n per second of d, or 0 when d is not positive.
func Rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// samples collects up to a fixed number of int64 values from many
// goroutines without a lock; values past the capacity are counted and
// dropped.
type samples struct {
	vals    []int64
	next    atomic.Int64
	dropped atomic.Int64
}

func newSamples(capacity int) *samples {
	return &samples{vals: make([]int64, capacity)}
}

func (s *samples) add(v int64) {
	i := s.next.Add(1) - 1
	if i >= int64(len(s.vals)) {
		s.dropped.Add(1)
		return
	}
	s.vals[i] = v
}

// sorted returns a sorted copy of the values collected.
func (s *samples) sorted() []int64 {
	n := min(s.next.Load(), int64(len(s.vals)))
	out := slices.Clone(s.vals[:n])
	slices.Sort(out)
	return out
}

// LedgerCounts is what a crash run's completion ledger says.
type LedgerCounts struct {
	// Lost is how many of the n jobs never completed.
	Lost int
	// Twice is how many jobs completed more than once.
	Twice int
	// Unknown is how many ledger entries name no job of the run.
	Unknown int
}

// CountLedger counts lost, repeated and unknown completions of jobs 0..n-1
// given every completion recorded, in any order.
func CountLedger(n int, done []int64) LedgerCounts {
	seen := make([]int32, n)
	var c LedgerCounts
	for _, id := range done {
		if id < 0 || id >= int64(n) {
			c.Unknown++
			continue
		}
		seen[id]++
		if seen[id] == 2 {
			c.Twice++
		}
	}
	for _, k := range seen {
		if k == 0 {
			c.Lost++
		}
	}
	return c
}
