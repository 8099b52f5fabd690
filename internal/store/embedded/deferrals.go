package embedded

import (
	"context"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// maxFailuresKept bounds the failures of a target Deferrals remembers
// while it reads the journal: enough for any breaker's threshold shown.
const maxFailuresKept = 64

// Deferrals implements store.DeferralReader: it reads the journal records
// still on disk (those after the oldest kept snapshot) and returns the
// deferrals of job id (OpDefer records: only a refusal of its target's
// breaker writes one), each with the failed attempts of that target's
// jobs before it that counted for the breaker (outcome records with
// BreakerFailed, newest first, at most threshold). A job enqueued before
// the oldest record kept is read as far as the records go; Complete is
// false then, and for a failure of a job whose enqueue is not among the
// records the target is not known, so it is not listed.
func (s *Store) Deferrals(ctx context.Context, id uint64, threshold int) (store.DeferralLog, error) {
	s.mu.Lock()
	if err := s.readableLocked(); err != nil {
		s.mu.Unlock()
		return store.DeferralLog{}, err
	}
	j, err := s.jobLocked(id)
	s.mu.Unlock()
	if err != nil {
		return store.DeferralLog{}, err
	}
	target := j.Spec.Target
	var (
		log      store.DeferralLog
		onTarget = map[uint64]bool{}
		fails    []store.Failure // the target's, oldest first, bounded
	)
	err = s.j.Replay(0, func(pos journal.Position, rec []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		op, err := state.Decode(rec)
		if err != nil {
			return err
		}
		switch {
		case op.Kind == state.OpEnqueue:
			if op.ID == id {
				log.Complete = true
			}
			if op.Spec.Target == target {
				onTarget[op.ID] = true
			}
		case (op.Kind == state.OpFail || op.Kind == state.OpRequeue || op.Kind == state.OpSucceed) && op.BreakerFailed && onTarget[op.ID]:
			fails = append(fails, store.Failure{ID: op.ID, At: op.At})
			if len(fails) > maxFailuresKept {
				fails = fails[len(fails)-maxFailuresKept:]
			}
		case op.Kind == state.OpDefer && op.ID == id:
			d := store.Deferral{At: op.At, Due: op.Due}
			for i := len(fails) - 1; i >= 0 && len(d.After) < threshold; i-- {
				d.After = append(d.After, fails[i])
			}
			log.Deferrals = append(log.Deferrals, d)
		}
		return nil
	})
	log.Target = target
	return log, err
}
