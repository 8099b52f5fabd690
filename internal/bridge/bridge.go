// Package bridge is the seam between package runlog and the packages that
// run it on another store (runlog/postgres): they open their store with
// the options a runlog.Config implies and hand it to the engine, without
// package runlog importing them (an embedded-only program then links no
// database driver). It is also how package runlogtest runs a handler as
// the engine does, without runlog exporting its internals. Package runlog
// sets the funcs in its init.
package bridge

import (
	"context"
	"log/slog"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// StoreOptions are the parts of a runner's configuration that a store
// needs, resolved from a runlog.Config with its defaults applied.
type StoreOptions struct {
	// Circuit configures every target's breaker.
	Circuit retry.Circuit
	// DisableAfter disables a target failing this long, in ms (0 never).
	DisableAfter int64
	// Limits are the configured rate limits (nil: none).
	Limits *state.LimitConfig
	// Retention says how long finished jobs are kept (nil: forever).
	Retention *state.Retention
	// Now is the runner's clock, in ms since the Unix epoch.
	Now func() int64
	// Logger is the runner's logger.
	Logger *slog.Logger
}

// Start validates cfg (a runlog.Config) as runlog.Open does, calls open
// with the store options it implies and starts a runner (a *runlog.Runner)
// on the store open returns. Set by package runlog.
var Start func(cfg any, open func(StoreOptions) (store.Store, error)) (any, error)

// NewJob checks req (a *runlog.JobRequest) as Enqueue checks it under the
// default Config, accepting any non-empty kind, and returns the job to
// store at now. Set by package runlog.
var NewJob func(req any, now time.Time) (store.NewJob, error)

// The engine's seams for package runlogtest, set by package runlog.
var (
	// AttemptContext returns ctx as the context of an attempt described by
	// info (a runlog.AttemptInfo) of a job with metadata md:
	// runlog.AttemptFrom returns info, runlog.MetadataFrom md, and
	// runlog.RecordOutput records into it (see Output).
	AttemptContext func(ctx context.Context, info any, md map[string]string) context.Context
	// Output returns the output recorded in an attempt context.
	Output func(ctx context.Context) []byte
	// RunHandler runs one attempt of h (a runlog.Handler) on payload in
	// ctx (an attempt context) as the runner does: decoding the payload,
	// turning a panic into an error.
	RunHandler func(ctx context.Context, h any, payload []byte) error
	// HandlerKind is the kind h (a runlog.Handler) is bound to by
	// HandleTyped, or "".
	HandlerKind func(h any) string
	// Outcome classifies a handler's error as the runner does: "success",
	// "retryable", "permanent" or "unsafe", and the wait the error asked
	// for (< 0: none).
	Outcome func(err error) (string, time.Duration)
)
