package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/state"
)

// DefaultMaxBody is the default limit on a request body (1 MiB).
const DefaultMaxBody = 1 << 20

// APIConfig configures an API.
type APIConfig struct {
	// Token, when not empty, is required as "Authorization: Bearer TOKEN"
	// on every path but /healthz (and those handed to Dashboard).
	Token string
	// MaxBody limits request bodies; larger ones get 413 and nothing is
	// stored. Defaults to DefaultMaxBody.
	MaxBody int64
	// Policy says what job requests may contain.
	Policy Policy
	// Metrics, when not nil, is served at GET /metrics.
	Metrics http.Handler
	// Dashboard, when not nil, serves every path outside the API (/v1/...,
	// /metrics, /healthz), e.g. the web dashboard at /. It does its own
	// authentication with the same token.
	Dashboard http.Handler
	// Logger receives a line per failed request. Defaults to slog.Default().
	Logger *slog.Logger
	// Secrets, when not nil, are the signing secrets that PUT and DELETE
	// /v1/targets/secrets change and GET /v1/targets lists (ids only);
	// without them those paths answer 404.
	Secrets *Secrets
	// Limiter, when not nil, throttles wrong tokens (429 with Retry-After);
	// share it with the dashboard's Options.Limiter.
	Limiter *authlimit.Limiter
	// ReadOnly refuses every request that would change something (any
	// method but GET, HEAD and OPTIONS) with 403.
	ReadOnly bool
	// DataDir is the server's data directory, if it has one: GET
	// /v1/backup names it so that runlog backup DIR can check that DIR is
	// this server's.
	DataDir string
	// BasePath, when not empty, is the path the API is mounted at
	// ("/runlog"): it serves /runlog/v1/..., /runlog/healthz and
	// /runlog/metrics, and its Location headers carry it. It must start
	// with "/"; a trailing "/" is dropped.
	BasePath string
}

// API is the HTTP API of runlog serve over a runner; see docs/api.md and the
// OpenAPI document served at /v1/openapi.yaml. It is safe for concurrent use.
type API struct {
	runner    *runlog.Runner
	cfg       APIConfig
	tokenHash [sha256.Size]byte
	mux       *http.ServeMux
	accepting atomic.Bool
	base      string // BasePath without a trailing "/"
}

// NewAPI returns the API over r, accepting jobs.
func NewAPI(r *runlog.Runner, cfg APIConfig) *API {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &API{runner: r, cfg: cfg, tokenHash: sha256.Sum256([]byte(cfg.Token)), mux: http.NewServeMux(), base: strings.TrimRight(cfg.BasePath, "/")}
	a.accepting.Store(true)
	a.routes()
	return a
}

// SetAccepting sets whether /healthz reports the server as accepting jobs;
// the server clears it when it starts shutting down.
func (a *API) SetAccepting(ok bool) { a.accepting.Store(ok) }

func (a *API) routes() {
	m := a.mux
	m.HandleFunc("GET /healthz", a.health)
	m.HandleFunc("POST /v1/jobs", a.enqueue)
	m.HandleFunc("POST /v1/jobs/batch", a.enqueueBatch)
	m.HandleFunc("GET /v1/jobs", a.list)
	m.HandleFunc("GET /v1/jobs/{id}", a.job)
	m.HandleFunc("POST /v1/jobs/{id}/cancel", a.cancel)
	m.HandleFunc("POST /v1/jobs/{id}/retry", a.retry)
	m.HandleFunc("POST /v1/jobs/{id}/replay", a.replayJob)
	m.HandleFunc("POST /v1/replay", a.replayMatching)
	m.HandleFunc("DELETE /v1/jobs/{id}", a.discard)
	m.HandleFunc("POST /v1/discard", a.discardMatching)
	m.HandleFunc("GET /v1/targets", a.targets)
	m.HandleFunc("PUT /v1/targets/secrets", a.putSecret)
	m.HandleFunc("DELETE /v1/targets/secrets", a.deleteSecret)
	m.HandleFunc("POST /v1/targets/enable", a.enableTarget)
	m.HandleFunc("PUT /v1/limits", a.putLimit)
	m.HandleFunc("GET /v1/stats", a.stats)
	m.HandleFunc("GET /v1/backup", a.backup)
	m.HandleFunc("GET /v1/queues", a.queues)
	m.HandleFunc("PUT /v1/queues/{name}", a.putQueue)
	m.HandleFunc("POST /v1/queues/{name}/pause", a.pauseQueue)
	m.HandleFunc("POST /v1/queues/{name}/resume", a.resumeQueue)
	m.HandleFunc("GET /v1/openapi.yaml", serveOpenAPI)
	m.HandleFunc("POST /v1/schedules", a.createSchedule)
	m.HandleFunc("GET /v1/schedules", a.listSchedules)
	m.HandleFunc("GET /v1/schedules/{name}", a.getSchedule)
	m.HandleFunc("PATCH /v1/schedules/{name}", a.patchSchedule)
	m.HandleFunc("DELETE /v1/schedules/{name}", a.deleteSchedule)
	m.HandleFunc("POST /v1/schedules/{name}/pause", a.pauseSchedule)
	m.HandleFunc("POST /v1/schedules/{name}/resume", a.resumeSchedule)
	if a.cfg.Metrics != nil {
		m.Handle("GET /metrics", a.cfg.Metrics)
	}
	// The same paths without a method answer 405 in JSON; anything else 404.
	allowed := map[string]string{
		"/healthz": "GET", "/v1/jobs": "GET, POST", "/v1/jobs/{id}": "GET, DELETE",
		"/v1/jobs/{id}/cancel": "POST", "/v1/jobs/{id}/retry": "POST",
		"/v1/jobs/{id}/replay": "POST", "/v1/replay": "POST", "/v1/discard": "POST",
		// Only GET and DELETE: other methods on /v1/jobs/batch fall to
		// /v1/jobs/{id}.
		"GET /v1/jobs/batch": "POST", "DELETE /v1/jobs/batch": "POST",
		"/v1/targets": "GET", "/v1/stats": "GET", "/v1/openapi.yaml": "GET",
		"/v1/targets/secrets": "PUT, DELETE",
		"/v1/targets/enable":  "POST",
		"/v1/backup":          "GET",
		"/v1/queues":          "GET", "/v1/queues/{name}": "PUT",
		"/v1/queues/{name}/pause": "POST", "/v1/queues/{name}/resume": "POST",
		"/v1/schedules": "GET, POST", "/v1/schedules/{name}": "GET, PATCH, DELETE",
		"/v1/schedules/{name}/pause": "POST", "/v1/schedules/{name}/resume": "POST",
		"/v1/limits": "PUT",
	}
	if a.cfg.Metrics != nil {
		allowed["/metrics"] = "GET"
	}
	for pattern, allow := range allowed {
		m.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s is not allowed on %s; use %s", r.Method, r.URL.Path, allow))
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; see /v1/openapi.yaml", r.URL.Path))
	})
}

// ServeHTTP hands paths outside the API to the dashboard (if any), checks
// the token (every other path but exactly /healthz) and routes the request.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.base != "" {
		rest, ok := strings.CutPrefix(r.URL.Path, a.base)
		if !ok || !isAPIPath(rest) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s; the API is at %s/v1/", r.URL.Path, a.base))
			return
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = rest, ""
		r2.URL = &u
		r = r2
	}
	if a.cfg.Dashboard != nil && !isAPIPath(r.URL.Path) {
		a.cfg.Dashboard.ServeHTTP(w, r)
		return
	}
	if a.cfg.Token != "" && r.URL.Path != "/healthz" {
		if ok, wait := a.cfg.Limiter.Check(r.RemoteAddr, func() bool { return a.tokenMatches(r.Header.Get("Authorization")) }); wait > 0 {
			w.Header().Set("Retry-After", authlimit.RetryAfter(wait))
			writeError(w, http.StatusTooManyRequests, "too many wrong tokens from this address (or from everywhere): retry after "+authlimit.RetryAfter(wait)+" s with the right token")
			return
		} else if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="runlog"`)
			writeError(w, http.StatusUnauthorized, errUnauthorized)
			return
		}
	}
	if a.cfg.ReadOnly && !safeMethod(r.Method) {
		writeError(w, http.StatusForbidden, fmt.Sprintf("this API is read-only: %s %s is refused; use GET", r.Method, r.URL.Path))
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/jobs" {
		a.enqueue(w, r) // the hottest path, without the mux's matching
		return
	}
	a.mux.ServeHTTP(w, r)
}

// isAPIPath reports whether path belongs to the API rather than the
// dashboard.
func isAPIPath(path string) bool {
	return path == "/healthz" || path == "/metrics" || path == "/v1" || strings.HasPrefix(path, "/v1/")
}

// errUnauthorized is the answer to a request without the right token.
const errUnauthorized = "missing or wrong token: send Authorization: Bearer <token> (the server's --token / RUNLOG_TOKEN)"

// tokenMatches compares the bearer token of an Authorization header value in
// constant time (over hashes, so that not even the length leaks).
func (a *API) tokenMatches(h string) bool {
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(h[len(prefix):]))
	return subtle.ConstantTimeCompare(got[:], a.tokenHash[:]) == 1
}

func (a *API) health(w http.ResponseWriter, r *http.Request) {
	if !a.accepting.Load() {
		writeError(w, http.StatusServiceUnavailable, "shutting down")
		return
	}
	if err := a.runner.Err(); err != nil {
		// The store failed for good (e.g. the disk is full): only a
		// restart, after the cause is fixed, brings the server back.
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "failed", "error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *API) enqueue(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	res, err := a.enqueueBody(r.Context(), body)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	status := http.StatusCreated
	if res.Existing {
		status = http.StatusOK
	}
	writeCreated(w, status, a.base, res.ID, res.Existing)
}

// enqueueBody decodes the body of POST /v1/jobs and enqueues the job.
func (a *API) enqueueBody(ctx context.Context, body []byte) (runlog.EnqueueResult, error) {
	req, err := DecodeJobRequest(body, a.cfg.Policy)
	if err != nil {
		return runlog.EnqueueResult{}, err
	}
	return a.runner.EnqueueJob(ctx, req)
}

// appendCreated appends the JSON of Created{id, existing} and a newline.
func appendCreated(b []byte, id uint64, existing bool) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, id, 10)
	b = append(b, `,"existing":`...)
	b = strconv.AppendBool(b, existing)
	return append(b, "}\n"...)
}

// Header values shared by every answer of POST /v1/jobs (net/http only
// reads them).
var (
	jsonContentType = []string{"application/json"}
)

// writeCreated answers POST /v1/jobs: the bytes writeJSON would write for
// Created{id, existing}, and a Location header, built without reflection or
// header canonicalization (this is the hottest answer of the API). The
// Content-Length is net/http's: it counts a short answer itself.
func writeCreated(w http.ResponseWriter, status int, base string, id uint64, existing bool) {
	var buf [64]byte
	b := appendCreated(buf[:0], id, existing)
	h := w.Header()
	h["Location"] = []string{base + "/v1/jobs/" + strconv.FormatUint(id, 10)}
	h["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// enqueueBatch adds up to MaxBatch jobs with one durable write: all or
// none (any invalid job is a 400 naming its index and nothing is stored).
func (a *API) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	reqs, err := DecodeBatchRequest(body, a.cfg.Policy)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.runner.EnqueueMany(r.Context(), reqs)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := CreatedBatch{Jobs: make([]Created, len(res))}
	for i, c := range res {
		out.Jobs[i] = Created{ID: c.ID, Existing: c.Existing}
	}
	writeJSON(w, http.StatusCreated, out)
}

func (a *API) list(w http.ResponseWriter, r *http.Request) {
	f, err := parseListFilter(r.URL.Query())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	page, err := a.runner.List(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := JobList{Jobs: make([]Job, 0, len(page.Jobs)), Next: cursor(page.Next)}
	for _, j := range page.Jobs {
		out.Jobs = append(out.Jobs, jobView(j, false))
	}
	writeJSON(w, http.StatusOK, out)
}

// parseListFilter reads ?state=&kind=&target=&q=&after=&limit=&order=.
func parseListFilter(q map[string][]string) (runlog.ListFilter, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	f := runlog.ListFilter{Kind: get("kind"), Target: get("target"), Search: get("q"), Schedule: get("schedule")}
	if f.Schedule != "" {
		if err := state.ValidScheduleName(f.Schedule); err != nil {
			return f, badRequest("schedule: %v", err)
		}
	}
	switch s := runlog.State(get("state")); s {
	case "", runlog.StatePending, runlog.StateRunning, runlog.StateSucceeded, runlog.StateFailed, runlog.StateCancelled:
		f.State = s
	default:
		return f, badRequest("state %q: use pending, running, succeeded, failed or cancelled", s)
	}
	if v := get("after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return f, badRequest("after %q is not a cursor from a previous page's next", v)
		}
		f.After = n
	}
	if v := get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return f, badRequest("limit %q must be a number from 1 to %d", v, maxPage)
		}
		f.Limit = min(n, maxPage)
	}
	switch o := get("order"); o {
	case "", "newest":
	case "oldest":
		f.Oldest = true
	default:
		return f, badRequest("order %q: use newest or oldest", o)
	}
	return f, nil
}

// maxPage is the largest page GET /v1/jobs returns.
const maxPage = 1000

func (a *API) job(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r)
	if !ok {
		return
	}
	j, err := a.runner.Job(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, jobView(j, true))
}

func (a *API) cancel(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r)
	if !ok {
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var in struct {
		Reason string `json:"reason"`
	}
	if !onlySpace(body) {
		if err := checkText(body); err != nil {
			a.fail(w, r, err)
			return
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			a.fail(w, r, badRequest("the body must be empty or {\"reason\": \"...\"}: %v", err))
			return
		}
		if !onlySpace(body[dec.InputOffset():]) {
			a.fail(w, r, badRequest("the body has data after the {\"reason\": \"...\"} object; send one JSON object"))
			return
		}
	}
	if err := a.runner.Cancel(r.Context(), id, in.Reason); err != nil {
		a.fail(w, r, err)
		return
	}
	a.job(w, r)
}

func (a *API) retry(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r)
	if !ok {
		return
	}
	if err := a.runner.Retry(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.job(w, r)
}

func (a *API) targets(w http.ResponseWriter, r *http.Request) {
	s, err := a.runner.Stats(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var secrets map[string][]SecretInfo
	hasDefault := false
	if a.cfg.Secrets != nil {
		secrets, hasDefault = a.cfg.Secrets.List(), a.cfg.Secrets.HasDefault()
	}
	writeJSON(w, http.StatusOK, targetsView(s, secrets, hasDefault))
}

// SecretRequest is the body of PUT and DELETE /v1/targets/secrets.
type SecretRequest struct {
	Target string `json:"target"`
	// Secret (PUT) is "whsec_" and 24 to 64 bytes in base64; empty makes
	// one, shown once in the answer.
	Secret string `json:"secret,omitempty"`
	// SecretID (DELETE) names the secret to retire.
	SecretID string `json:"secret_id,omitempty"`
}

// SecretCreated is the answer of PUT /v1/targets/secrets: the new secret's
// id and creation time, the secret itself only when the server made it.
type SecretCreated struct {
	Target    string    `json:"target"`
	SecretID  string    `json:"secret_id"`
	CreatedAt time.Time `json:"created_at"`
	// Secret is set only when the request left it out.
	Secret string `json:"secret,omitempty"`
	// Active is every secret that now signs the target's deliveries.
	Active []SecretInfo `json:"active"`
}

// SecretsOfTarget is the answer of DELETE /v1/targets/secrets: the
// target's secrets that remain active.
type SecretsOfTarget struct {
	Target string       `json:"target"`
	Active []SecretInfo `json:"active"`
}

// decodeStrict decodes one JSON object into v, refusing unknown fields and
// data after it; what says what the body should be.
func decodeStrict(body []byte, v any, what string) error {
	if err := checkText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the body must be %s: %v", what, err)
	}
	if !onlySpace(body[dec.InputOffset():]) {
		return badRequest("the body has data after the object; send one %s", what)
	}
	return nil
}

// secretRequest reads the body of PUT or DELETE /v1/targets/secrets
// (what shows its shape in errors); false means it answered already.
func (a *API) secretRequest(w http.ResponseWriter, r *http.Request, what string) (*Secrets, SecretRequest, bool) {
	var in SecretRequest
	if a.cfg.Secrets == nil {
		a.fail(w, r, fmt.Errorf("%w: this server keeps no signing secrets", runlog.ErrNotFound))
		return nil, in, false
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return nil, in, false
	}
	if err := decodeStrict(body, &in, what); err != nil {
		a.fail(w, r, err)
		return nil, in, false
	}
	return a.cfg.Secrets, in, true
}

func (a *API) putSecret(w http.ResponseWriter, r *http.Request) {
	sec, in, ok := a.secretRequest(w, r, `{"target": "...", "secret": "whsec_..."}`)
	if !ok {
		return
	}
	if in.SecretID != "" {
		a.fail(w, r, badRequest("secret_id is chosen by the server; send target and secret only"))
		return
	}
	info, made, err := sec.Add(r.Context(), in.Target, in.Secret)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	target, _ := secretTarget(in.Target)
	a.cfg.Logger.Info("signing secret added", "target", target, "secret_id", info.ID)
	writeJSON(w, http.StatusCreated, SecretCreated{Target: target, SecretID: info.ID, CreatedAt: info.CreatedAt, Secret: made, Active: sec.List()[target]})
}

func (a *API) deleteSecret(w http.ResponseWriter, r *http.Request) {
	sec, in, ok := a.secretRequest(w, r, `{"target": "...", "secret_id": "sec_..."}`)
	if !ok {
		return
	}
	if in.Secret != "" {
		a.fail(w, r, badRequest("name the secret by its secret_id (GET /v1/targets lists them), not by the secret"))
		return
	}
	if in.SecretID == "" {
		a.fail(w, r, badRequest("secret_id is required (GET /v1/targets lists them)"))
		return
	}
	if err := sec.Remove(r.Context(), in.Target, in.SecretID); err != nil {
		a.fail(w, r, err)
		return
	}
	target, _ := secretTarget(in.Target)
	a.cfg.Logger.Info("signing secret retired", "target", target, "secret_id", in.SecretID)
	writeJSON(w, http.StatusOK, SecretsOfTarget{Target: target, Active: orEmpty(sec.List()[target])})
}

func (a *API) stats(w http.ResponseWriter, r *http.Request) {
	s, err := a.runner.Stats(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, statsView(s, time.Now()))
}

// pathID parses the {id} path value strictly: decimal digits only.
func (a *API) pathID(w http.ResponseWriter, r *http.Request) (uint64, bool) {
	s := r.PathValue("id")
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		a.fail(w, r, badRequest("job id %q is not a number", s))
		return 0, false
	}
	return id, true
}

// readBody reads the request body up to MaxBody; past it the client gets
// 413 and the caller stores nothing.
func (a *API) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if n := r.ContentLength; n >= 0 && n <= a.cfg.MaxBody {
		// The length is known (and net/http reads no further): one
		// allocation of the right size.
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			a.fail(w, r, badRequest("reading the body: %v", err))
			return nil, false
		}
		return body, true
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			// Read (and drop) some more of it, so that a client that sends
			// its whole body before reading the answer gets the 413 rather
			// than a reset connection; net/http closes the connection after.
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
			writeError(w, http.StatusRequestEntityTooLarge, tooLarge(tooBig.Limit))
			return nil, false
		}
		a.fail(w, r, badRequest("reading the body: %v", err))
		return nil, false
	}
	return body, true
}

// maxDrain is how much of a body over the limit is read and discarded
// before the 413 answer.
const maxDrain = 64 << 20

// tooLarge is the answer to a body over limit bytes.
func tooLarge(limit int64) string {
	return fmt.Sprintf("the body is over %d bytes (the server's --max-body)", limit)
}

// fail answers err with the status its kind calls for.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	if status >= 500 {
		a.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, status, message(err))
}

// categories are the sentinel errors that only say which kind of error
// wraps them: their text ("server: bad request: kinds: invalid request:
// ...") is left out of an answer, which says what to fix once.
var categories = []error{ErrBadRequest, kinds.ErrInvalid, runlog.ErrInvalid}

// message is the text of an error answer: err's text without the prefixes
// of the category sentinels it wraps, nor the engine's package name.
func message(err error) string {
	msg := strings.TrimPrefix(err.Error(), "runlog: ")
	for again := true; again; {
		again = false
		for _, c := range categories {
			if rest, ok := strings.CutPrefix(msg, c.Error()+": "); ok && errors.Is(err, c) {
				msg, again = rest, true
			}
		}
	}
	return msg
}

// statusOf maps an error onto an HTTP status.
func statusOf(err error) int {
	if s := scheduleStatus(err); s != 0 {
		return s
	}
	switch {
	case errors.Is(err, ErrBadRequest), errors.Is(err, runlog.ErrInvalid), errors.Is(err, runlog.ErrUnknownKind):
		return http.StatusBadRequest
	case errors.Is(err, runlog.ErrNotFound), errors.Is(err, ErrSecretNotFound), targetNotDisabled(err):
		return http.StatusNotFound
	case errors.Is(err, runlog.ErrFinished), errors.Is(err, runlog.ErrNotFailed), errors.Is(err, runlog.ErrNotReplayable), errors.Is(err, runlog.ErrNotFinished):
		return http.StatusConflict
	case errors.Is(err, runlog.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, runlog.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = marshal(Error{Error: "encode answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, Error{Error: msg})
}
