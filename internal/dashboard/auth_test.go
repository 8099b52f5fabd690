package dashboard

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
)

// browser is an HTTP client over real sockets from one source address
// (127.0.0.x: Linux answers on the whole loopback /8) that does not follow
// redirects and keeps its cookie by hand.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
	cookie string // the Cookie header, "" when none
}

func newBrowser(t *testing.T, base, source string) *browser {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &browser{t: t, base: base, client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (br *browser) do(method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	br.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, br.base+path, body)
	if err != nil {
		br.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if br.cookie != "" {
		req.Header.Set("Cookie", br.cookie)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := br.client.Do(req)
	if err != nil {
		br.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// login posts token to /login and keeps the session cookie it gets.
func (br *browser) login(token string) *http.Response {
	br.t.Helper()
	res, _ := br.do(http.MethodPost, "/login", url.Values{"token": {token}, "next": {"/"}})
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			br.cookie = c.Name + "=" + c.Value
		}
	}
	return res
}

// loggedIn reports whether GET / shows the dashboard (not the login page).
func (br *browser) loggedIn() bool {
	br.t.Helper()
	res, _ := br.do(http.MethodGet, "/", nil)
	switch {
	case res.StatusCode == http.StatusOK:
		return true
	case res.StatusCode == http.StatusSeeOther && strings.HasPrefix(res.Header.Get("Location"), "/login"):
		return false
	}
	br.t.Fatalf("GET /: %d to %q", res.StatusCode, res.Header.Get("Location"))
	return false
}

// clockedServer starts the dashboard behind token on a real socket, with
// a clock the test moves.
func clockedServer(t *testing.T, token string) (*bundle, *manualClock, *httptest.Server) {
	t.Helper()
	b := setup(t, Options{Token: token})
	clk := &manualClock{t: time.Now()}
	b.h().now = clk.now
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	return b, clk, srv
}

func TestSessionPerLogin(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	b, _, srv := clockedServer(t, token)
	id := b.enqueue("ok", runlog.RunIn(time.Hour))
	one, two := newBrowser(t, srv.URL, "127.0.0.1"), newBrowser(t, srv.URL, "127.0.0.1")
	res := one.login(token)
	two.login(token)
	if res.StatusCode != http.StatusSeeOther || one.cookie == "" || two.cookie == "" {
		t.Fatalf("login: %d, cookies %q %q", res.StatusCode, one.cookie, two.cookie)
	}
	if one.cookie == two.cookie {
		t.Errorf("two logins got the same session cookie %q", one.cookie)
	}
	c := res.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != int(sessionMaxAge/time.Second) {
		t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/, MaxAge 12 h, not Secure over plain HTTP", c)
	}
	if v := strings.TrimPrefix(one.cookie, sessionCookie+"="); len(v) < 22 || strings.Contains(v, token) {
		t.Errorf("session id %q: want at least 128 random bits, not the token", v)
	}
	_, page1 := one.do(http.MethodGet, "/", nil)
	_, page2 := two.do(http.MethodGet, "/", nil)
	csrf1, csrf2 := csrfOf(t, page1), csrfOf(t, page2)
	if csrf1 == csrf2 {
		t.Error("two sessions have the same CSRF token")
	}
	// The CSRF token is the session's: another session's is refused.
	cancel := fmt.Sprintf("/jobs/%d/cancel", id)
	if res, _ := one.do(http.MethodPost, cancel, url.Values{csrfField: {csrf2}}); res.StatusCode != http.StatusForbidden {
		t.Errorf("an action with another session's CSRF token: %d, want 403", res.StatusCode)
	}
	// Logout ends the session on the server: the old cookie is refused,
	// the other session goes on.
	kept := one.cookie
	if res, _ := one.do(http.MethodPost, "/logout", url.Values{csrfField: {csrf1}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	one.cookie = kept // as if the cookie had been copied before the logout
	if one.loggedIn() {
		t.Error("the cookie of a session that logged out still opens the dashboard")
	}
	if res, _ := one.do(http.MethodPost, cancel, url.Values{csrfField: {csrf1}}); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("an action with the cookie of a session that logged out: %d, want 401", res.StatusCode)
	}
	if j, _ := b.runner.Job(context.Background(), id); j.State != runlog.StatePending {
		t.Fatalf("a refused action changed the job: %s", j.State)
	}
	if !two.loggedIn() {
		t.Error("logging out one session ended another")
	}
	if res, _ := two.do(http.MethodPost, cancel, url.Values{csrfField: {csrf2}}); res.StatusCode != http.StatusSeeOther {
		t.Errorf("an action of the other session: %d, want 303", res.StatusCode)
	}
}

func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Token: "s3cret-token"})
	srv := httptest.NewTLSServer(b.handler)
	defer srv.Close()
	cl := srv.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := cl.PostForm(srv.URL+"/login", url.Values{"token": {"s3cret-token"}})
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cs := res.Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Errorf("session cookie over TLS %v: want Secure", cs)
	}
}

func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	_, clk, srv := clockedServer(t, token)
	br := newBrowser(t, srv.URL, "127.0.0.1")

	// Idle: a session with no request for an hour has ended.
	br.login(token)
	clk.advance(sessionIdle - time.Second)
	if !br.loggedIn() {
		t.Fatal("a session ended before its idle limit")
	}
	clk.advance(sessionIdle)
	if br.loggedIn() {
		t.Error("a session idle for an hour still opens the dashboard")
	}

	// Absolute: a session in use ends 12 h after its login.
	br.login(token)
	for used := time.Duration(0); used+50*time.Minute < sessionMaxAge; used += 50 * time.Minute {
		clk.advance(50 * time.Minute)
		if !br.loggedIn() {
			t.Fatalf("a session in use ended after %v", used+50*time.Minute)
		}
	}
	clk.advance(50 * time.Minute)
	if br.loggedIn() {
		t.Error("a session still opens the dashboard 12 h after its login")
	}
}

func TestSessionTableBounded(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	_, _, srv := clockedServer(t, token)
	first := newBrowser(t, srv.URL, "127.0.0.1")
	first.login(token)
	for range maxSessions {
		newBrowser(t, srv.URL, "127.0.0.1").login(token)
	}
	if first.loggedIn() {
		t.Error("the oldest session survived a full table")
	}
}

// TestSessionMemory checks that the table holds no more than maxSessions
// and drops expired sessions, even when nobody logs in.
func TestSessionMemory(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	b, clk, srv := clockedServer(t, token)
	a := b.h().auth
	size := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.sessions)
	}
	for range maxSessions + 10 {
		newBrowser(t, srv.URL, "127.0.0.1").login(token)
	}
	if n := size(); n != maxSessions {
		t.Errorf("%d sessions in memory after %d logins, want %d", n, maxSessions+10, maxSessions)
	}
	clk.advance(sessionIdle)
	if newBrowser(t, srv.URL, "127.0.0.1").loggedIn() { // any request sweeps
		t.Fatal("a browser without a cookie is logged in")
	}
	if n := size(); n != 0 {
		t.Errorf("%d expired sessions are still in memory after a sweep", n)
	}
}

func TestLoginThrottle(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	_, clk, srv := clockedServer(t, token)
	attacker := newBrowser(t, srv.URL, "127.0.0.1")

	checked, throttled := 0, 0
	var last *http.Response
	for range 300 {
		res := attacker.login("guess")
		switch res.StatusCode {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
			throttled++
			last = res
		default:
			t.Fatalf("wrong login: %d", res.StatusCode)
		}
	}
	if checked != authlimit.Budget+1 || throttled != 300-checked {
		t.Fatalf("300 wrong logins at once: %d checked, %d throttled; want %d checked", checked, throttled, authlimit.Budget+1)
	}
	if ra, err := strconv.Atoi(last.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("429 without a usable Retry-After: %q", last.Header.Get("Retry-After"))
	}
	// While the address waits, even the right token is not checked, by the
	// login form or the bearer header.
	if res := attacker.login(token); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right token from a throttled address: %d, want 429", res.StatusCode)
	}
	if res, _ := attacker.do(http.MethodGet, "/", nil, "Authorization", "Bearer "+token); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right bearer token from a throttled address: %d, want 429", res.StatusCode)
	}
	// Another address logs in at once.
	operator := newBrowser(t, srv.URL, "127.0.0.2")
	start := time.Now()
	if res := operator.login(token); res.StatusCode != http.StatusSeeOther || !operator.loggedIn() {
		t.Fatalf("right token from another address: %d", res.StatusCode)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a right login took %v", d)
	}
	// After the wait the first address gets its turn; the wait doubles with
	// each further wrong token.
	clk.advance(authlimit.BaseWait)
	if res := attacker.login("guess"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token after the wait: %d, want 401", res.StatusCode)
	}
	clk.advance(authlimit.BaseWait)
	if res := attacker.login(token); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
		t.Errorf("1 s into a 2 s wait: %d, Retry-After %q; want 429, 1", res.StatusCode, res.Header.Get("Retry-After"))
	}
	clk.advance(authlimit.BaseWait)
	if res := attacker.login(token); res.StatusCode != http.StatusSeeOther {
		t.Errorf("right token after the wait: %d, want 303", res.StatusCode)
	}
	// A right token does not forgive the wrong ones (a client sharing the
	// address would reset an attacker's count): the next wrong one makes
	// the address wait 4 s.
	if res := attacker.login("guess"); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token after a right login: %d, want 401", res.StatusCode)
	}
	if res := attacker.login(token); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "4" {
		t.Errorf("after a right login and a wrong one: %d, Retry-After %q; want 429, 4", res.StatusCode, res.Header.Get("Retry-After"))
	}
	// An address starts afresh Forget after its last wrong token.
	clk.advance(authlimit.Forget)
	for i := range authlimit.Budget {
		if res := attacker.login("guess"); res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d after Forget: %d, want 401", i+1, res.StatusCode)
		}
	}
}

func TestLoginThrottleGlobal(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	_, clk, srv := clockedServer(t, token)
	// An operator logged in before the attack.
	operator := newBrowser(t, srv.URL, "127.0.3.1")
	if res := operator.login(token); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", res.StatusCode)
	}
	// Many addresses, each within its own budget, together exhaust the
	// global allowance.
	checked := 0
	for i := 0; checked < authlimit.GlobalBurst; i++ {
		br := newBrowser(t, srv.URL, fmt.Sprintf("127.0.1.%d", 1+i))
		for range authlimit.Budget {
			if res := br.login("guess"); res.StatusCode == http.StatusUnauthorized {
				checked++
			}
		}
	}
	fresh := newBrowser(t, srv.URL, "127.0.2.1")
	res := fresh.login("guess")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != strconv.Itoa(int(authlimit.GlobalRefill/time.Second)) {
		t.Fatalf("a new address after %d wrong tokens from many: %d, Retry-After %q; want 429, %d", checked, res.StatusCode, res.Header.Get("Retry-After"), int(authlimit.GlobalRefill/time.Second))
	}
	// An address that sent the right token before is not locked out by
	// strangers: its login is checked (and its own limit still holds).
	if res := newBrowser(t, srv.URL, "127.0.3.1").login(token); res.StatusCode != http.StatusSeeOther {
		t.Errorf("the operator's address under the global cap: %d, want 303", res.StatusCode)
	}
	clk.advance(authlimit.GlobalRefill)
	if res := fresh.login(token); res.StatusCode != http.StatusSeeOther {
		t.Errorf("right token once the global allowance refilled: %d, want 303", res.StatusCode)
	}
}
