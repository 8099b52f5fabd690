// Package httpapi is runlog's JSON HTTP API as an http.Handler to mount
// in an application, over its *runlog.Runner: the API of runlog serve
// (docs/api.md; its OpenAPI document at /v1/openapi.yaml) under a base
// path.
//
//	mux.Handle("/runlog/", httpapi.New(r, httpapi.Options{
//		Token:    os.Getenv("RUNLOG_TOKEN"), // "Authorization: Bearer TOKEN" on every path but /healthz
//		BasePath: "/runlog",
//	}))
//
// It serves GET /v1/jobs, /v1/jobs/{id}, /v1/targets, /v1/stats,
// /v1/openapi.yaml and /healthz, and POST /v1/jobs, /v1/jobs/batch,
// /v1/jobs/{id}/cancel and /v1/jobs/{id}/retry, each under BasePath. A job
// of the application's kinds is enqueued with its payload as JSON:
//
//	POST /runlog/v1/jobs {"kind": "email", "payload": {"to": "ada@example.com"}, "key": "welcome-ada"}
//
// and refused with 400 when the runner has no handler for the kind. The
// kinds http and exec keep the fields runlog serve gives them (they run
// only if the runner registered handlers for them).
//
// Of the protections of runlog serve, the handler keeps the token (with
// wrong tokens throttled), the bounded bodies, and the refusal of
// cross-site writes (403, http.CrossOriginProtection) and of writes that
// are not JSON (415). The Host check against DNS rebinding is the
// application's: without a Token, serve it only to trusted clients and
// answer only to the application's own host names.
package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
	"github.com/runlog/runlog/internal/server"
)

// Options configures the API. The zero value serves an open, writable API
// at "/".
type Options struct {
	// Token, when not empty, is required as "Authorization: Bearer TOKEN"
	// on every path but /healthz; wrong tokens are throttled (429).
	Token string
	// ReadOnly refuses every request that would change something (POST:
	// enqueue, cancel, retry) with 403.
	ReadOnly bool
	// BasePath is the path the API is mounted at ("/runlog"), empty for
	// "/": it serves BasePath+"/v1/..." and BasePath+"/healthz", and its
	// Location headers carry it. Mount the handler at BasePath+"/" without
	// http.StripPrefix. It must start with "/".
	BasePath string
	// MaxBody limits request bodies (413 beyond). Defaults to 1 MiB.
	MaxBody int64
	// Retry is the retry policy whose fields a request's retry object
	// leaves out keep. Defaults to runlog's default policy (10 attempts,
	// 500ms doubling to 30s).
	Retry runlog.RetryPolicy
	// Logger receives a line per failed request. Defaults to slog.Default().
	Logger *slog.Logger
}

// New returns the API over r. It panics if BasePath does not start with
// "/", as a mux pattern would.
func New(r *runlog.Runner, opts Options) http.Handler {
	if opts.BasePath != "" && opts.BasePath[0] != '/' {
		panic("httpapi: Options.BasePath " + opts.BasePath + " must start with /")
	}
	retry := opts.Retry
	if retry == (runlog.RetryPolicy{}) {
		retry = server.DefaultRetry
	}
	api := server.NewAPI(r, server.APIConfig{
		Token:    opts.Token,
		MaxBody:  opts.MaxBody,
		ReadOnly: opts.ReadOnly,
		BasePath: opts.BasePath,
		Logger:   opts.Logger,
		Policy:   server.Policy{AppKinds: true, Retry: retry},
		Limiter:  authlimit.New(nil),
	})
	return server.MountGuard(api)
}
