package pgstore

import (
	"context"

	"github.com/runlog/runlog/internal/store"
)

// Finish implements store.Store: it records the outcomes, then claims up to
// lim.Max due jobs for the slots they held. (The embedded store does both in
// one durable write; here they are two transactions, which the engine does
// not depend on.)
func (s *Store) Finish(ctx context.Context, now int64, rnd func() uint32, outs []store.Outcome, lim store.Limits) ([]store.Claim, error) {
	if err := s.finishOutcomes(ctx, now, rnd, outs); err != nil {
		return nil, err
	}
	if lim.Max <= 0 {
		return nil, nil
	}
	return s.Claim(ctx, now, lim)
}
