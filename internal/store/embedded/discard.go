package embedded

import (
	"context"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// Discard implements store.Store: it journals an OpDiscard carrying the
// job's image, taken from memory or from the table, so that replay and the
// spiller (which deletes the job's keys from the table) need nothing else.
func (s *Store) Discard(ctx context.Context, now int64, id uint64) error {
	job, err := s.lockJob(id)
	if err != nil {
		return err
	}
	if err := store.DiscardError(id, job.State, state.Discardable(&job)); err != nil {
		s.mu.Unlock()
		return err
	}
	// A payload memory holds for the job leaves with it.
	var resident int64
	if mem, ok := s.st.Job(id); ok && !mem.Spilled() {
		resident = int64(len(mem.Spec.Payload))
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpDiscard, ID: id, At: now, Image: state.DiscardImage(&job)}})
	if s.st.DiscardApplied() {
		s.sp.resident -= resident
	}
	s.mu.Unlock()
	return wait()
}

// discardingLocked reports whether job id was discarded while its copy in
// the table is not deleted yet (reads must not show it). s.mu must be held.
func (sp *spiller) discardingLocked(id uint64) bool {
	_, ok := sp.discarding[id]
	return ok
}
