package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Cookie and field names.
const (
	sessionCookie = "runlog_session"
	flashCookie   = "runlog_flash"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
	// sessionMaxAge is how long a login lasts.
	sessionMaxAge = 7 * 24 * time.Hour
)

// auth holds the dashboard's secrets. The key is derived from the token
// (so sessions survive a restart and end when the token changes) or, with
// no token, drawn at random when the handler is built.
type auth struct {
	token     bool
	tokenHash [sha256.Size]byte
	session   string // the session cookie's value: HMAC(key, "session")
	csrf      string // the CSRF token: HMAC(key, "csrf")
}

func newAuth(token string) *auth {
	a := &auth{token: token != "", tokenHash: sha256.Sum256([]byte(token))}
	var key []byte
	if token != "" {
		k := sha256.Sum256([]byte("runlog dashboard key\x00" + token))
		key = k[:]
	} else {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // crypto/rand.Read never fails
	}
	a.session = mac(key, "session")
	a.csrf = mac(key, "csrf")
	return a
}

func mac(key []byte, label string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	return hex.EncodeToString(m.Sum(nil))
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

// authorized reports whether r may see the dashboard: always without a
// token; with one, a valid session cookie or the API's bearer header.
func (a *auth) authorized(r *http.Request) bool {
	if !a.token {
		return true
	}
	if c, err := r.Cookie(sessionCookie); err == nil && equal(c.Value, a.session) {
		return true
	}
	const prefix = "Bearer "
	if h := r.Header.Get("Authorization"); len(h) > len(prefix) && strings.EqualFold(h[:len(prefix)], prefix) {
		return a.tokenOK(h[len(prefix):])
	}
	return false
}

// validCSRF reports whether the POST r carries the CSRF token, in the form
// or in the X-CSRF-Token header (htmx requests). The form must be parsed.
func (a *auth) validCSRF(r *http.Request) bool {
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostForm.Get(csrfField)
	}
	return got != "" && equal(got, a.csrf)
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
	if !h.auth.tokenOK(r.PostForm.Get("token")) {
		h.log.Warn("dashboard: login with a wrong token", "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", pageData{Title: "Log in", Next: next,
			Error: "That is not the server's token. It is the value of --token, --token-file or RUNLOG_TOKEN."})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: h.auth.session, Path: "/",
		MaxAge: int(sessionMaxAge / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *handler) logoutForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusOK, "logout", pageData{Title: "Log out"})
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
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
