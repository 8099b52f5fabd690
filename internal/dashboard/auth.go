package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/runlog/runlog/internal/authlimit"
)

// Cookie and field names.
const (
	sessionCookie = "runlog_session"
	flashCookie   = "runlog_flash"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
)

// Limits of the dashboard's sessions.
const (
	// sessionMaxAge is how long a login lasts at most, however busy.
	sessionMaxAge = 12 * time.Hour
	// sessionIdle ends a session that made no request for this long (an
	// open dashboard refreshes itself, so it stays logged in).
	sessionIdle = time.Hour
	// maxSessions bounds the session table; a login beyond it ends the
	// oldest session.
	maxSessions = 1000
	// sweepEvery is how often a request drops the expired sessions.
	sweepEvery = time.Minute
)

// auth holds the dashboard's secrets: the token's hash and, with a token,
// the table of sessions, each made by a login with a random id that the
// cookie carries and its own CSRF token; without a token, one CSRF token
// drawn at random when the handler is built. Sessions live in memory: a
// restart logs everybody out.
type auth struct {
	token     bool
	tokenHash [sha256.Size]byte
	anonCSRF  string // the CSRF token without a token (no sessions)
	now       func() time.Time
	limiter   *authlimit.Limiter

	mu        sync.Mutex
	sessions  map[[sha256.Size]byte]*session // by the hash of the id
	logins    uint64                         // sessions made so far
	lastSweep time.Time
}

// session is one login.
type session struct {
	csrf    string
	seq     uint64 // the order of the logins: the lowest is the oldest
	created time.Time
	seen    time.Time // the last request
}

// newAuth returns the auth of token on the clock now; wrong tokens count
// on lim (a limiter of its own when nil).
func newAuth(token string, now func() time.Time, lim *authlimit.Limiter) *auth {
	if lim == nil {
		lim = authlimit.New(now)
	}
	return &auth{
		token:     token != "",
		tokenHash: sha256.Sum256([]byte(token)),
		anonCSRF:  randomID(),
		now:       now,
		limiter:   lim,
		sessions:  make(map[[sha256.Size]byte]*session),
		lastSweep: now(),
	}
}

// randomID returns 256 random bits, base64url-encoded.
func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b)
}

// equal compares in constant time over hashes, so that not even the length
// leaks.
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// tokenOK reports whether s is the server's token.
func (a *auth) tokenOK(s string) bool {
	h := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(h[:], a.tokenHash[:]) == 1
}

// expired reports whether s has ended at now.
func (s *session) expired(now time.Time) bool {
	return now.Sub(s.created) >= sessionMaxAge || now.Sub(s.seen) >= sessionIdle
}

// newSession starts a session and returns its id. It drops the expired
// sessions and, when the table is full, the oldest one.
func (a *auth) newSession() string {
	id := randomID()
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.sweep(now)
	if len(a.sessions) >= maxSessions {
		var oldest [sha256.Size]byte
		seq := uint64(math.MaxUint64)
		for k, s := range a.sessions {
			if s.seq < seq {
				oldest, seq = k, s.seq
			}
		}
		delete(a.sessions, oldest)
	}
	a.logins++
	a.sessions[sha256.Sum256([]byte(id))] = &session{csrf: randomID(), seq: a.logins, created: now, seen: now}
	return id
}

// sweep drops the expired sessions. mu is held.
func (a *auth) sweep(now time.Time) {
	for k, s := range a.sessions {
		if s.expired(now) {
			delete(a.sessions, k)
		}
	}
	a.lastSweep = now
}

// maybeSweep drops the expired sessions when the last sweep is more than
// sweepEvery ago, so that the table holds only live sessions even when
// nobody logs in.
func (a *auth) maybeSweep() {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.lastSweep) >= sweepEvery || now.Before(a.lastSweep) {
		a.sweep(now)
	}
}

// lookup returns the live session of id (and marks it used), or nil.
func (a *auth) lookup(id string) *session {
	now := a.now()
	k := sha256.Sum256([]byte(id))
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[k]
	if s == nil {
		return nil
	}
	if s.expired(now) {
		delete(a.sessions, k)
		return nil
	}
	s.seen = now
	return s
}

// endSession deletes the session of id: its cookie no longer works.
func (a *auth) endSession(id string) {
	k := sha256.Sum256([]byte(id))
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, k)
}

// access is how a request is allowed in.
type access struct {
	ok      bool
	session *session // the login's session, nil without a token or with the bearer header
	bearer  bool     // authorized by "Authorization: Bearer" (no CSRF needed)
	wait    time.Duration
}

// check reports whether r may see the dashboard: always without a token;
// with one, a live session cookie or the API's bearer header. A wrong
// bearer token counts against the client's address like a wrong login,
// and while the address must wait, the header is not even checked (wait
// says how long).
func (a *auth) check(r *http.Request) access {
	if !a.token {
		return access{ok: true}
	}
	a.maybeSweep()
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		if s := a.lookup(c.Value); s != nil {
			return access{ok: true, session: s}
		}
	}
	const prefix = "Bearer "
	if h := r.Header.Get("Authorization"); len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		right, wait := a.limiter.Check(r.RemoteAddr, func() bool { return a.tokenOK(h[len(prefix):]) })
		return access{ok: right, bearer: right, wait: wait}
	}
	return access{}
}

// authorized reports whether r may see the dashboard (see check).
func (a *auth) authorized(r *http.Request) bool { return a.check(r).ok }

// csrfToken returns the CSRF token of the pages shown to r, "" when r is
// not logged in (or uses the bearer header, which needs none).
func (a *auth) csrfToken(acc access) string {
	switch {
	case !acc.ok:
		return ""
	case !a.token:
		return a.anonCSRF
	case acc.session != nil:
		return acc.session.csrf
	}
	return ""
}

// validCSRF reports whether the POST r carries the CSRF token of its
// session, in the form or in the X-CSRF-Token header (htmx requests). A
// request with the bearer header needs none: a browser does not send one
// on its own. The form must be parsed.
func (a *auth) validCSRF(r *http.Request, acc access) bool {
	if acc.bearer {
		return true
	}
	want := a.csrfToken(acc)
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostForm.Get(csrfField)
	}
	return want != "" && got != "" && equal(got, want)
}

// tooMany answers a client that must wait d before its token is checked.
func (h *handler) tooMany(w http.ResponseWriter, r *http.Request, d time.Duration) {
	w.Header().Set("Retry-After", authlimit.RetryAfter(d))
	h.log.Debug("dashboard: token checks throttled", "remote", r.RemoteAddr, "path", r.URL.Path, "retry_after", authlimit.RetryAfter(d))
	msg := "Too many wrong tokens were sent (from your address, or from everywhere at once). Wait " + authlimit.RetryAfter(d) + " s and try again."
	if r.URL.Path == "/login" && r.Method == http.MethodPost {
		h.render(w, r, http.StatusTooManyRequests, "login", pageData{Title: "Log in", Next: localPath(r.PostForm.Get("next")), Error: msg})
		return
	}
	h.errorPage(w, r, http.StatusTooManyRequests, msg)
}

// needLogin sends an unauthenticated request to the login page: a redirect
// for a page, HX-Redirect for an htmx request, a 401 page for an action.
func (h *handler) needLogin(w http.ResponseWriter, r *http.Request) {
	next := "/login?next=" + url.QueryEscape(r.URL.RequestURI())
	switch {
	case r.Header.Get("HX-Request") == "true":
		w.Header().Set("HX-Redirect", next)
		w.WriteHeader(http.StatusUnauthorized)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		http.Redirect(w, r, next, http.StatusSeeOther)
	default:
		h.errorPage(w, r, http.StatusUnauthorized, "You are not logged in (or your session ended). Log in and try again.")
	}
}

// localPath returns p if it is a path on this server ("/..." but not
// "//host" or "/\host"), else "/": redirects never leave the dashboard.
func localPath(p string) string {
	if p == "" || p[0] != '/' || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") {
		return "/"
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return p
}

func (h *handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if !h.auth.token {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", pageData{Title: "Log in", Next: localPath(r.URL.Query().Get("next"))})
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.errorPage(w, r, http.StatusBadRequest, "The form could not be read: "+err.Error())
		return
	}
	next := localPath(r.PostForm.Get("next"))
	if !h.auth.token {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	right, wait := h.auth.limiter.Check(r.RemoteAddr, func() bool { return h.auth.tokenOK(r.PostForm.Get("token")) })
	if wait > 0 {
		h.tooMany(w, r, wait)
		return
	}
	if !right {
		h.log.Warn("dashboard: login with a wrong token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", pageData{Title: "Log in", Next: next,
			Error: "That is not the server's token. It is the value of --token, --token-file or RUNLOG_TOKEN."})
		return
	}
	// A login replaces the session the browser had, if any.
	if c, err := r.Cookie(sessionCookie); err == nil {
		h.auth.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.auth.newSession(), Path: "/",
		MaxAge: int(sessionMaxAge / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *handler) logoutForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "logout", pageData{Title: "Log out"})
}

// logout ends the session on the server (the cookie no longer works, even
// if a copy of it was kept) and clears the cookie.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		h.auth.endSession(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	target := "/login"
	if !h.auth.token {
		target = "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// setFlash keeps a one-time message for the next page (post, redirect, get).
func setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	if len(msg) > 1000 {
		msg = msg[:1000] + "…"
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// takeFlash returns the pending message, if any, and clears it.
func takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	msg, err := url.QueryUnescape(c.Value)
	if err != nil {
		return ""
	}
	return msg
}
