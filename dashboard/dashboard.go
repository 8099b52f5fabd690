// Package dashboard is runlog's web dashboard as an http.Handler to mount
// in an application, over its *runlog.Runner: the pages runlog serve shows
// (overview, jobs, a job, failed jobs, targets), with retry and cancel.
//
//	mux.Handle("/admin/jobs/", dashboard.New(r, dashboard.Options{
//		Token:    os.Getenv("RUNLOG_TOKEN"), // asked once at its login page
//		BasePath: "/admin/jobs",
//	}))
//
// Every asset is embedded: it needs no build step and no network. The
// dashboard protects itself as in runlog serve: with a Token, a login and
// a session cookie (HttpOnly, SameSite=Strict, Path the BasePath); every
// POST refused when it comes from another site (http.CrossOriginProtection)
// or lacks its session's CSRF token; a Content-Security-Policy that allows
// only its own scripts and styles. Without a Token anyone who reaches it
// may act on jobs: mount it so, only behind the application's own
// authentication or on a listener only trusted clients reach. What it
// leaves to the application is the Host check of runlog serve (a web page
// that rebinds its DNS name to a loopback address can read an
// unauthenticated dashboard): serve it under a Token, or answer only to
// the application's own host names. See docs/dashboard.md.
package dashboard

import (
	"log/slog"
	"net/http"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
	idash "github.com/runlog/runlog/internal/dashboard"
	"github.com/runlog/runlog/internal/mount"
)

// Options configures the dashboard. The zero value serves an open,
// writable dashboard at "/".
type Options struct {
	// Token, when not empty, is asked for once at the login page (or sent
	// as "Authorization: Bearer TOKEN"); wrong tokens are throttled.
	Token string
	// ReadOnly hides every action (retry, cancel) and refuses it with 403.
	ReadOnly bool
	// BasePath is the path the dashboard is mounted at ("/admin/jobs"),
	// empty for "/": it serves only the paths under it, and its links,
	// redirects and cookies carry it. Mount the handler at BasePath+"/"
	// without http.StripPrefix. It must start with "/".
	BasePath string
	// Logger receives a line per action and per failed request. Defaults
	// to slog.Default().
	Logger *slog.Logger

	// server holds what runlog serve shares with its dashboard (set
	// through package mount).
	server *serverParts
}

// serverParts are the server's limiter and recorder.
type serverParts struct {
	limiter  *authlimit.Limiter
	recorder *idash.Recorder
}

func init() {
	mount.Dashboard = func(opts any, lim *authlimit.Limiter, rec *idash.Recorder) any {
		o := opts.(Options)
		o.server = &serverParts{limiter: lim, recorder: rec}
		return o
	}
}

// ChartBuffer is the buffer of the subscription (Runner.Subscribe) that
// feeds the charts of attempts per minute. Under a burst of more ended
// attempts than it holds before the dashboard reads them, the charts miss
// some (the counts by state, from Runner.Stats, miss none).
const ChartBuffer = 8192

// New returns the dashboard over r. Its charts count the attempts that
// end from now on (a subscription to r's events, which ends when r
// closes). It panics if BasePath does not start with "/", as a mux
// pattern would.
func New(r *runlog.Runner, opts Options) http.Handler {
	if opts.BasePath != "" && opts.BasePath[0] != '/' {
		panic("dashboard: Options.BasePath " + opts.BasePath + " must start with /")
	}
	io := idash.Options{Token: opts.Token, ReadOnly: opts.ReadOnly, BasePath: opts.BasePath, Logger: opts.Logger}
	if opts.server != nil {
		io.Limiter, io.Recorder = opts.server.limiter, opts.server.recorder
	} else {
		io.Recorder = idash.NewRecorder()
		sub := r.Subscribe(ChartBuffer, runlog.EventSucceeded, runlog.EventRetried, runlog.EventFailed)
		go func() {
			for ev := range sub.Events() {
				io.Recorder.AttemptFinished(runlog.AttemptEvent{Kind: ev.Kind, Target: ev.Target, Outcome: ev.Outcome, Duration: ev.Duration})
			}
		}()
	}
	return idash.New(r, io)
}
