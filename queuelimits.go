package runlog

import (
	"context"
	"fmt"
	"strings"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// SetQueueLimit sets the rate limit of queue name (DefaultQueue when
// empty) from now on, durably (a journaled op, or the queue's row that
// every PostgreSQL node shares): every attempt of the queue takes a token
// of its bucket, and a due job that finds none is deferred to the queue's
// next free slot, no attempt counted. The zero Limit removes it. The
// bucket's state is derived from the attempts started, so a restart does
// not refill it. The queue's concurrency and pause are kept.
func (r *Runner) SetQueueLimit(ctx context.Context, name string, l Limit) (QueueStats, error) {
	rl, err := l.limit()
	if err != nil {
		return QueueStats{}, err
	}
	return r.setQueue(ctx, name, nil, nil, &rl)
}

// SetQueueSetting changes what of queue name's setting is not nil at once,
// in one durable change: its concurrency (see SetQueueConcurrency), its
// pause (PauseQueue, ResumeQueue) and its rate limit (SetQueueLimit).
func (r *Runner) SetQueueSetting(ctx context.Context, name string, concurrency *int, paused *bool, limit *Limit) (QueueStats, error) {
	if concurrency != nil && (*concurrency < 0 || *concurrency > state.MaxQueueConcurrency) {
		return QueueStats{}, fmt.Errorf("%w: queue concurrency %d must be within 0 to %d", ErrInvalid, *concurrency, state.MaxQueueConcurrency)
	}
	var rl *retry.Limit
	if limit != nil {
		l, err := limit.limit()
		if err != nil {
			return QueueStats{}, err
		}
		rl = &l
	}
	return r.setQueue(ctx, name, concurrency, paused, rl)
}

// applyQueueLimits gives each queue of cfg.QueueLimits its limit, where the
// store holds another.
func applyQueueLimits(st store.Store, cfg Config) error {
	if len(cfg.QueueLimits) == 0 {
		return nil
	}
	ctx := context.Background()
	qs, err := st.Queues(ctx)
	if err != nil {
		return err
	}
	have := make(map[string]retry.Limit, len(qs))
	for _, qi := range qs {
		have[qi.Name] = qi.Limit
	}
	for name, l := range cfg.QueueLimits {
		q, _ := storedQueue(name) // validated
		rl, _ := l.limit()        // validated
		if have[q] == rl {
			continue
		}
		if _, err := st.SetQueue(ctx, cfg.Clock.Now().UnixMilli(), q, nil, nil, &rl); err != nil {
			return fmt.Errorf("runlog: set the rate limit of queue %q (Config.QueueLimits): %w", name, err)
		}
	}
	return nil
}

// validQueueLimits checks Config.QueueLimits.
func validQueueLimits(m map[string]Limit) error {
	for name, l := range m {
		if _, err := storedQueue(name); err != nil {
			return fmt.Errorf("QueueLimits: %w", err)
		}
		if _, err := l.limit(); err != nil {
			return fmt.Errorf("%w: QueueLimits[%q]: %s", ErrInvalid, name, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		}
	}
	return nil
}
