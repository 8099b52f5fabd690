// Package dashboard is the web dashboard of runlog serve: server-rendered
// pages (html/template) over a runlog.Runner, with htmx for auto-refresh and
// actions, every asset embedded so that the binary needs no build step and
// no network.
//
// Pages: / (overview: counts by state, attempts per minute, queue lag, pool,
// breakers), /jobs (filter, search, cursor paging, bulk cancel and retry),
// /jobs/{id} (payload, attempts, next retry, breaker, retry and cancel),
// /failed (the dead letters, retry one, some or all matching a filter),
// /targets (every breaker with its per-minute outcomes), /login and /logout.
// Actions are POSTs under /jobs/{id}/retry, /jobs/{id}/cancel,
// /actions/bulk and /actions/retry-matching; they call Runner.Cancel and
// Runner.Retry, so they are journaled like the API's.
//
// Security: with a token, every page needs a session cookie set by /login
// (HttpOnly, SameSite=Strict, a random id of a session kept in memory, with
// an absolute and an idle expiry, ended by /logout) or the API's
// "Authorization: Bearer" header. Wrong tokens are throttled per client
// address and over all addresses (429 with Retry-After). Every POST is
// refused with 403 when it comes from another site (Sec-Fetch-Site and
// Origin, see http.CrossOriginProtection) or lacks the CSRF token of its
// session that each page puts in its forms and htmx headers. ReadOnly hides every action and
// refuses it with 403. Pages send a Content-Security-Policy that allows
// only the dashboard's own scripts and styles.
//
// The pages stay fast with a large journal: counts come from Runner.Stats,
// which the engine maintains, and lists are paged (BenchmarkPages).
package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
)

// Options configures the dashboard handler.
type Options struct {
	// Token, when not empty, is the server's token: the dashboard asks for
	// it once (/login) and then knows the browser by a session cookie.
	Token string
	// Limiter, when not nil, counts the wrong tokens sent to the login
	// form and in bearer headers; give the API's, so that guesses count
	// the same at every door. Without one the dashboard has its own.
	Limiter *authlimit.Limiter
	// ReadOnly hides every action and refuses it with 403.
	ReadOnly bool
	// Recorder, when not nil, supplies the per-minute attempt series; it
	// must be the Observer (or one of the Observers) of the runner.
	Recorder *Recorder
	// Logger receives a line per action and per failed request. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// BasePath, when not empty, is the path the dashboard is mounted at
	// ("/admin/jobs"): it serves the paths under it, and its links,
	// redirects and cookies carry it. It must start with "/"; a trailing
	// "/" is dropped.
	BasePath string
}

// Limits of the dashboard's requests.
const (
	// PageSize is the number of jobs per page of /jobs and /failed.
	PageSize = 50
	// MaxBulk is the largest number of jobs one bulk action names.
	MaxBulk = 1000
	// MaxRetryMatching bounds how many failed jobs one "retry all
	// matching" retries; the answer says when more remain.
	MaxRetryMatching = 10000
	// maxForm bounds POST bodies.
	maxForm = 256 << 10
)

// handler is the dashboard: a mux of pages and actions behind the session
// and CSRF checks.
type handler struct {
	runner *runlog.Runner
	opts   Options
	log    *slog.Logger
	mux    *http.ServeMux
	auth   *auth
	now    func() time.Time
	// base is Options.BasePath without a trailing "/"; links rewrites the
	// pages' absolute links under it (nil without one).
	base  string
	links *strings.Replacer
}

// New returns the dashboard over r as an http.Handler to mount at "/" on
// the server's mux. It serves /, /jobs, /jobs/{id}, /failed, /targets,
// /login, /logout, /static/ and the POST actions; it never claims /v1/,
// /metrics or /healthz (requests for them get 404).
func New(r *runlog.Runner, opts Options) http.Handler {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	h := &handler{
		runner: r,
		opts:   opts,
		log:    opts.Logger,
		mux:    http.NewServeMux(),
		now:    time.Now,
	}
	h.base = strings.TrimRight(opts.BasePath, "/")
	if h.base != "" {
		h.links = basePathLinks(h.base)
	}
	h.auth = newAuth(opts.Token, func() time.Time { return h.now() }, opts.Limiter)
	h.routes()
	return h
}

func (h *handler) routes() {
	m := h.mux
	m.Handle("GET /static/", staticHandler())
	m.HandleFunc("GET /login", h.loginForm)
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("GET /logout", h.logoutForm)
	m.HandleFunc("POST /logout", h.logout)
	m.HandleFunc("GET /{$}", h.overview)
	m.HandleFunc("GET /jobs", h.jobs)
	m.HandleFunc("GET /jobs/{id}", h.job)
	m.HandleFunc("GET /jobs/{id}/deferrals", h.deferrals)
	m.HandleFunc("GET /failed", h.failed)
	m.HandleFunc("GET /targets", h.targets)
	m.HandleFunc("POST /targets/enable", h.enableTarget)
	m.HandleFunc("GET /schedules", h.schedules)
	m.HandleFunc("POST /schedules/{name}/pause", h.pauseSchedule)
	m.HandleFunc("POST /schedules/{name}/resume", h.resumeSchedule)
	m.HandleFunc("GET /queues", h.queues)
	m.HandleFunc("POST /queues/set", h.setQueue)
	m.HandleFunc("POST /queues/{name}/pause", h.pauseQueue)
	m.HandleFunc("POST /queues/{name}/resume", h.resumeQueue)
	m.HandleFunc("POST /targets/limit", h.setTargetLimit)
	m.HandleFunc("POST /jobs/{id}/retry", h.retryOne)
	m.HandleFunc("POST /jobs/{id}/cancel", h.cancelOne)
	m.HandleFunc("POST /jobs/{id}/replay", h.replayOne)
	m.HandleFunc("POST /actions/bulk", h.bulk)
	m.HandleFunc("POST /actions/retry-matching", h.matching("retry"))
	m.HandleFunc("POST /actions/retry-group", h.group("retry"))
	m.HandleFunc("POST /actions/cancel-matching", h.matching("cancel"))
	m.HandleFunc("POST /jobs/{id}/discard", h.discardOne)
	m.HandleFunc("POST /actions/discard-matching", h.matching("discard"))
	m.HandleFunc("POST /actions/discard-group", h.group("discard"))
	// GET only, so that a wrong method on a page's path answers 405.
	m.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		h.errorPage(w, r, http.StatusNotFound, fmt.Sprintf("There is no page %s.", r.URL.Path))
	})
}

// ServeHTTP sets the security headers, checks the session (all but the
// login page and the static assets) and, for a POST, the origin, the CSRF
// token and the read-only flag, then routes the request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.base != "" {
		var ok bool
		if r, ok = stripBase(r, h.base); !ok {
			http.NotFound(w, r)
			return
		}
		w = &baseWriter{ResponseWriter: w, base: h.base}
	}
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	public := r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
	if r.Method == http.MethodPost {
		if err := crossOrigin.Check(r); err != nil {
			h.log.Warn("dashboard: cross-site request refused", "path", r.URL.Path, "origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
			h.errorPage(w, r, http.StatusForbidden, "This action came from another site and was refused. Open the dashboard itself and try again.")
			return
		}
	}
	var acc access
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		acc = h.auth.check(r)
		r = r.WithContext(context.WithValue(r.Context(), accessKey{}, acc))
	}
	if !public && acc.wait > 0 {
		h.tooMany(w, r, acc.wait)
		return
	}
	if !public && !acc.ok {
		h.needLogin(w, r)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path != "/login" {
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			h.errorPage(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !h.auth.validCSRF(r, acc) {
			h.errorPage(w, r, http.StatusForbidden, "The form's security token is missing or stale (the server may have restarted). Reload the page and try again.")
			return
		}
		if h.opts.ReadOnly && r.URL.Path != "/logout" {
			h.errorPage(w, r, http.StatusForbidden, "This dashboard is read-only: actions are turned off. Use the API or the runlog CLI.")
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

var crossOrigin = http.NewCrossOriginProtection()

// accessKey is the context key of a request's access (see auth.check),
// computed once per request.
type accessKey struct{}

// accessOf returns the access ServeHTTP found for r.
func (h *handler) accessOf(r *http.Request) access {
	if acc, ok := r.Context().Value(accessKey{}).(access); ok {
		return acc
	}
	return access{ok: !h.auth.token}
}

// render executes a page template into a buffer, so that a template error
// becomes a clean 500 instead of half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, data pageData) {
	data.setCommon(h, w, r)
	var buf bytes.Buffer
	if err := pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		h.log.Error("dashboard: render", "page", name, "err", err)
		http.Error(w, "dashboard: the page could not be rendered; see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if h.links != nil {
		_, _ = h.links.WriteString(w, buf.String())
		return
	}
	_, _ = w.Write(buf.Bytes())
}

// errorPage answers status with a page that says what went wrong.
func (h *handler) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error", pageData{Title: http.StatusText(status), Error: msg, Status: status})
}

// engineError maps an engine error to a page: 404 for an unknown job, 503
// when the runner is closed, 500 otherwise.
func (h *handler) engineError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, runlog.ErrNotFound):
		h.errorPage(w, r, http.StatusNotFound, "No such job (it may have been dropped by retention).")
	case errors.Is(err, runlog.ErrClosed):
		h.errorPage(w, r, http.StatusServiceUnavailable, "The runner is shutting down; try again once the server is back.")
	case errors.Is(err, context.Canceled):
		// The client went away.
	default:
		h.log.Error("dashboard: engine call failed", "path", r.URL.Path, "err", err)
		h.errorPage(w, r, http.StatusInternalServerError, "The runner answered with an error: "+err.Error())
	}
}
