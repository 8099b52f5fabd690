package embedded

import (
	"context"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// lifecycleLocked appends and applies the OpTarget that the outcome op
// last in ops brings to its target (state.DisableRule: gone, or failing
// for Config.DisableAfterMS), so that the disable is journaled in the same
// write as the outcome that caused it. s.mu must be held.
func (s *Store) lifecycleLocked(ops []state.Op, gone bool) []state.Op {
	life := s.st.Lifecycle(&ops[len(ops)-1], gone)
	if life.Kind == 0 {
		return ops
	}
	ops = append(ops, life)
	s.applyLocked(&ops[len(ops)-1], s.appended+uint64(len(ops)))
	return ops
}

// notifyDisabled tells the engine of the disables among ops, now durable.
func (s *Store) notifyDisabled(ops []state.Op) {
	f := s.onDisabled.Load()
	if f == nil {
		return
	}
	for i := range ops {
		if op := &ops[i]; op.Kind == state.OpTarget && op.Life.Disable {
			(*f)(op.Life.Target, op.Life.Reason)
		}
	}
}

// EnableTarget implements store.Store: it journals an OpTarget enable.
func (s *Store) EnableTarget(ctx context.Context, now int64, target string) (store.TargetInfo, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return store.TargetInfo{}, err
	}
	if !s.st.TargetDisabled(target) {
		s.mu.Unlock()
		return store.TargetInfo{}, store.ErrNotDisabled
	}
	wait := s.submitLocked([]state.Op{state.TargetOp(target, false, "", now)})
	l := s.st.TargetLoad()[target]
	info := store.TargetInfo{Target: target, Breaker: s.st.Breaker(target), Pending: l.Pending, Running: l.Running}
	s.mu.Unlock()
	return info, wait()
}
