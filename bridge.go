package runlog

import (
	"context"
	"log/slog"
	"time"

	"github.com/runlog/runlog/internal/bridge"
	"github.com/runlog/runlog/internal/store"
)

// The engine's side of package bridge: how runlog/postgres starts a runner
// on its store and checks a job it enqueues in the caller's transaction.
func init() {
	bridge.Start = func(c any, open func(bridge.StoreOptions) (store.Store, error)) (any, error) {
		cfg := c.(Config).withDefaults()
		if err := cfg.validate(); err != nil {
			return nil, err
		}
		clock := cfg.Clock
		st, err := open(bridge.StoreOptions{
			Circuit:      cfg.Breaker.circuit(),
			DisableAfter: cfg.disableAfterMS(),
			Limits:       cfg.limitConfig(),
			Retention:    cfg.Retention.rules(),
			Now:          func() int64 { return clock.Now().UnixMilli() },
			Logger:       cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		if err := applyQueues(st, cfg); err != nil {
			st.Close()
			return nil, err
		}
		return start(st, cfg), nil
	}
	bridge.NewJob = func(req any, now time.Time) (store.NewJob, error) {
		return validateRequest(req.(*JobRequest), now)
	}
	bridge.AttemptContext = func(ctx context.Context, info any, md map[string]string) context.Context {
		return context.WithValue(ctx, attemptKey{}, &attemptCtx{info: info.(AttemptInfo), metadata: md})
	}
	bridge.Output = func(ctx context.Context) []byte {
		if a, ok := ctx.Value(attemptKey{}).(*attemptCtx); ok {
			return a.output()
		}
		return nil
	}
	bridge.RunHandler = func(ctx context.Context, h any, payload []byte) (err error) {
		handler := h.(Handler)
		info, _ := AttemptFrom(ctx)
		defer func() {
			if p := recover(); p != nil {
				err = panicked(slog.New(slog.DiscardHandler), info, p)
			}
		}()
		return handler.run(ctx, payload)
	}
	bridge.HandlerKind = func(h any) string { return h.(Handler).boundKind() }
	bridge.Outcome = func(err error) (string, time.Duration) {
		class, after, _ := classify(err)
		return class.String(), time.Duration(after) * time.Millisecond
	}
}

// validateRequest checks req with the default Config as Enqueue would, but
// without a runner's handlers.
func validateRequest(req *JobRequest, now time.Time) (store.NewJob, error) {
	if req.Args != nil {
		if err := encodeArgs(req); err != nil {
			return store.NewJob{}, err
		}
		req.Args = nil
	}
	cfg := Config{}.withDefaults()
	// newJob checks only that the kind is registered; a job enqueued in a
	// caller's transaction has no runner, so any non-empty kind is accepted.
	cfg.Handlers = map[string]Handler{req.Kind: nil}
	return (&Runner{cfg: cfg}).newJob(req, now)
}
