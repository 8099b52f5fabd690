package runlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
)

// AttemptFunc runs one attempt, as middleware sees it: info names the
// attempt (as AttemptFrom(ctx) does), and the error is the handler's, with
// the meaning Handle gives it (nil, Permanent, RetryAfter, Unsafe, or a
// plain retryable error).
type AttemptFunc func(ctx context.Context, info AttemptInfo) error

// Middleware wraps every attempt of every kind (Config.Middleware): it
// gets the next step and returns the step that runs instead, which may
// look at the attempt before and after next, change the error, or not call
// next at all. The context it passes on must be derived from the one it
// got (the attempt's payload and output travel in it).
//
//	func timing(next runlog.AttemptFunc) runlog.AttemptFunc {
//		return func(ctx context.Context, a runlog.AttemptInfo) error {
//			began := time.Now()
//			err := next(ctx, a)
//			observe(a.Kind, time.Since(began), err)
//			return err
//		}
//	}
type Middleware func(next AttemptFunc) AttemptFunc

// EnqueueFunc adds jobs, as enqueue middleware sees it: every enqueue
// (Enqueue, EnqueueArgs, EnqueueJob, EnqueueMany) comes through it with its
// requests, and the results answer them in order.
type EnqueueFunc func(ctx context.Context, reqs []JobRequest) ([]EnqueueResult, error)

// EnqueueMiddleware wraps every enqueue (Config.EnqueueMiddleware): it may
// look at or change the requests (a copy: the caller's slice must stay as
// it was), refuse them, or look at the results. A request's Args, if set,
// are resolved into Kind and Payload after the middleware.
type EnqueueMiddleware func(next EnqueueFunc) EnqueueFunc

// chain wraps last in mws, the first outermost; false when there is no
// middleware (the caller then calls its step directly).
func chain[F any, M ~func(F) F](mws []M, last F) (F, bool) {
	f := last
	for i := len(mws) - 1; i >= 0; i-- {
		f = mws[i](f)
	}
	return f, len(mws) > 0
}

// errLostContext is the attempt's error when a middleware called the next
// step with a context that was not derived from the attempt's.
var errLostContext = errors.New("runlog: a middleware passed on a context not derived from the attempt's; derive it from the context the middleware got")

// callHandler is the innermost step: it runs the handler of the attempt
// that ctx carries on its payload.
func callHandler(ctx context.Context, _ AttemptInfo) error {
	a, ok := ctx.Value(attemptKey{}).(*attemptCtx)
	if !ok || a.h == nil {
		return errLostContext
	}
	return a.h.run(ctx, a.payload)
}

// LogAttempts is middleware that logs one line per attempt to logger (nil:
// slog.Default()) once it ends: at Info when it succeeded, at Warn when it
// failed, with the job id, kind, target, attempt number, outcome, duration
// and error.
func LogAttempts(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next AttemptFunc) AttemptFunc {
		return func(ctx context.Context, a AttemptInfo) error {
			began := time.Now()
			err := next(ctx, a)
			class, _, _ := classify(err)
			attrs := []slog.Attr{
				slog.Uint64("id", a.JobID), slog.String("kind", a.Kind), slog.String("target", a.Target),
				slog.Int("attempt", a.Attempt), slog.String("outcome", class.String()), slog.Duration("took", time.Since(began)),
			}
			if err == nil {
				logger.LogAttrs(ctx, slog.LevelInfo, "runlog: attempt succeeded", attrs...)
			} else {
				logger.LogAttrs(ctx, slog.LevelWarn, "runlog: attempt failed", append(attrs, slog.String("err", err.Error()))...)
			}
			return err
		}
	}
}

// RecoverPanics is middleware that turns a panic of the steps inside it
// into a retryable failure with the stack in the error, logged at Error to
// logger (nil: slog.Default()), as the runner does around all middleware.
// Put it after middleware that should see a panic as an error (e.g.
// LogAttempts, or metrics): Middleware: {LogAttempts(l), RecoverPanics(l)}.
func RecoverPanics(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next AttemptFunc) AttemptFunc {
		return func(ctx context.Context, a AttemptInfo) (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = panicked(logger, a, p)
				}
			}()
			return next(ctx, a)
		}
	}
}

// panicked logs a recovered panic p of attempt a and returns the attempt's
// error: retryable, with the stack.
func panicked(logger *slog.Logger, a AttemptInfo, p any) error {
	stack := debug.Stack()
	logger.Error("runlog: handler panicked; the attempt counts as a retryable failure", "id", a.JobID, "kind", a.Kind, "target", a.Target,
		"attempt", a.Attempt, "panic", fmt.Sprint(p), "stack", string(stack))
	return fmt.Errorf("panic: %v\n%s", p, stack)
}
