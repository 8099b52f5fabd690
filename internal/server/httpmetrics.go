package server

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/state"
)

// instrument wraps h so that every request is observed in
// runlog_http_request_duration_seconds by route, method and status code;
// each label takes a bounded set of values (route: the API's path patterns
// or "dashboard" or "unknown"; method: the standard ones or "other").
func (m *Metrics) instrument(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		m.observeHTTP(route(r.URL.Path), method(r.Method), sw.status, time.Since(began))
	})
}

// observeHTTP records one request.
func (m *Metrics) observeHTTP(route, method string, status int, d time.Duration) {
	m.httpSeconds.WithLabelValues(route, method, codeLabel(status)).Observe(d.Seconds())
}

// codeLabel is the status as a label value, without formatting the usual
// ones.
func codeLabel(status int) string {
	switch status {
	case http.StatusOK:
		return "200"
	case http.StatusCreated:
		return "201"
	}
	return strconv.Itoa(status)
}

// statusWriter records the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader records the status and passes it on.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and passes the bytes on.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the underlying writer (Flush,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// route is the label of a request path: the API route it matches, with
// {id} for a job id, "dashboard" for a path outside the API, "unknown" for
// an API path that matches no route.
func route(path string) string {
	switch path {
	case "/healthz", "/metrics", "/v1/jobs", "/v1/jobs/batch", "/v1/targets", "/v1/targets/enable", "/v1/stats", "/v1/openapi.yaml", "/v1/queues", "/v1/schedules", "/v1/replay", "/v1/backup", "/v1/limits":
		return path
	}
	if rest, ok := strings.CutPrefix(path, "/v1/queues/"); ok {
		name, action, _ := strings.Cut(rest, "/")
		if name != "" && (action == "" || action == "pause" || action == "resume") {
			return strings.TrimSuffix("/v1/queues/{name}/"+action, "/")
		}
	}
	if rest, ok := strings.CutPrefix(path, "/v1/schedules/"); ok {
		name, action, _ := strings.Cut(rest, "/")
		if state.ValidScheduleName(name) == nil {
			switch action {
			case "":
				return "/v1/schedules/{name}"
			case "pause", "resume":
				return "/v1/schedules/{name}/" + action
			}
		}
		return "unknown"
	}
	if !isAPIPath(path) {
		return "dashboard"
	}
	if rest, ok := strings.CutPrefix(path, "/v1/jobs/"); ok {
		id, action, _ := strings.Cut(rest, "/")
		if id != "" && strings.Trim(id, "0123456789") == "" {
			switch action {
			case "":
				return "/v1/jobs/{id}"
			case "cancel", "retry", "replay":
				return "/v1/jobs/{id}/" + action
			}
		}
	}
	return "unknown"
}

// method is the label of a request method: a standard method, or "other".
func method(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}
