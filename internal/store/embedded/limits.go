package embedded

import (
	"context"
	"slices"
	"strings"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// SetLimit implements store.Store: it journals an OpLimit.
func (s *Store) SetLimit(ctx context.Context, now int64, target string, lim retry.Limit) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return err
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpLimit, At: now, Target: target, Limit: lim}})
	s.mu.Unlock()
	return wait()
}

// withFlowsLocked adds to out (sorted by target) each target's flow and
// limit in force, and the targets that have only a flow or a configured
// limit. s.mu must be held.
func (s *Store) withFlowsLocked(out []store.TargetInfo) []store.TargetInfo {
	if !s.st.HasFlows() {
		return out
	}
	seen := make(map[string]int, len(out))
	for i := range out {
		seen[out[i].Target] = i
	}
	add := func(t string) {
		if _, ok := seen[t]; !ok {
			seen[t] = len(out)
			out = append(out, store.TargetInfo{Target: t})
		}
	}
	s.st.Flows(func(t string, _ state.Flow, _ retry.Limit) bool { add(t); return true })
	if c := s.st.Limits(); c != nil {
		for t := range c.PerTarget {
			add(t)
		}
	}
	for i := range out {
		out[i].Flow, out[i].Limit = s.st.Flow(out[i].Target)
	}
	slices.SortFunc(out, func(a, b store.TargetInfo) int { return strings.Compare(a.Target, b.Target) })
	return out
}
