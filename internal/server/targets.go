package server

import (
	"cmp"
	"slices"
	"sync"

	"github.com/runlog/runlog"
)

// OtherTarget is the target label of the series that fold every target
// beyond the busiest Config.MetricsTargets together.
const OtherTarget = "other"

// DefaultMetricsTargets is how many targets keep their own label in the
// metrics unless Config.MetricsTargets says otherwise.
const DefaultMetricsTargets = 50

// maxTracked bounds the targets whose attempts are counted between two
// picks: past it, a pick happens at once (a flood of new targets between
// scrapes cannot grow the map without bound).
const maxTracked = 100_000

// targetFold decides which targets keep their own label value in the
// metrics: the limit busiest ones by name (attempts since the last pick,
// plus pending and running jobs at the pick), re-picked at each scrape;
// every other target is folded into OtherTarget. The label value comes from
// API clients (any string is a target), so without the bound a client that
// sends 3,000 targets makes 3,000 series that are never dropped.
type targetFold struct {
	limit int

	mu     sync.Mutex
	named  map[string]bool   // guarded by mu: the targets that keep their label
	counts map[string]uint64 // guarded by mu: attempts per target since the last pick
	// dropped are targets that lost their label at the last pick, for the
	// caller to delete their series.
	dropped []string // guarded by mu
}

func newTargetFold(limit int) *targetFold {
	return &targetFold{limit: limit, named: map[string]bool{}, counts: map[string]uint64{}}
}

// label counts an attempt of target and returns its label value: the
// target itself while it is named (or a free place is left), else
// OtherTarget.
func (f *targetFold) label(target string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[target]++
	if f.named[target] {
		return target
	}
	if len(f.named) < f.limit {
		f.named[target] = true
		return target
	}
	if len(f.counts) > maxTracked {
		f.pickLocked(nil)
	}
	return OtherTarget
}

// pick chooses the named targets again from the attempts counted since the
// last pick and the load of targets (from a Stats); it returns the named
// set (not to be changed) and the targets that lost their label.
func (f *targetFold) pick(targets []runlog.TargetStats) (named map[string]bool, dropped []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pickLocked(targets)
	dropped, f.dropped = f.dropped, nil
	return f.named, dropped
}

func (f *targetFold) pickLocked(targets []runlog.TargetStats) {
	score := f.counts
	for _, t := range targets {
		n := uint64(t.Pending + t.Running)
		if n == 0 && (t.Limit != (runlog.Limit{}) || !t.HoldUntil.IsZero() || t.RampWindow > 0) {
			n = 1 // a target under flow control is shown even while idle
		}
		if n > 0 {
			score[t.Target] += n
		}
	}
	type scored struct {
		target string
		n      uint64
	}
	all := make([]scored, 0, len(score))
	for t, n := range score {
		all = append(all, scored{t, n})
	}
	slices.SortFunc(all, func(a, b scored) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.target, b.target)
	})
	named := make(map[string]bool, f.limit)
	for _, s := range all[:min(len(all), f.limit)] {
		named[s.target] = true
	}
	// Places left keep the targets named before (by name), so that a quiet
	// interval does not churn the series.
	if len(named) < f.limit {
		old := make([]string, 0, len(f.named))
		for t := range f.named {
			if !named[t] {
				old = append(old, t)
			}
		}
		slices.Sort(old)
		for _, t := range old[:min(len(old), f.limit-len(named))] {
			named[t] = true
		}
	}
	for t := range f.named {
		if !named[t] {
			f.dropped = append(f.dropped, t)
		}
	}
	f.named = named
	f.counts = make(map[string]uint64, len(named))
}
