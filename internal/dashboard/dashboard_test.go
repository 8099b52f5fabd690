package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

func TestPages(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	ok := b.enqueue("ok", runlog.Key("order-7"), runlog.Target("partner.example"))
	bad := b.enqueue("bad", runlog.Target("partner.example"))
	future := b.enqueue("ok", runlog.RunIn(time.Hour), runlog.Key("later-1"))
	flaky := b.enqueue("retry", runlog.Target("flaky.example"))
	b.waitState(ok, runlog.StateSucceeded)
	b.waitState(flaky, runlog.StateFailed)
	b.waitState(bad, runlog.StateFailed)

	tests := []struct {
		path string
		want []string // substrings of the body
		not  []string
	}{
		{"/", []string{`data-count="succeeded">1<`, `data-count="failed">2<`, `data-count="pending">1<`, "Attempts per minute", `<svg class="chart"`, "Queue lag", "Pause auto-refresh", `hx-trigger="every 5s"`, fmt.Sprintf("of %d targets", targetsSeen(t, b))}, nil},
		{"/jobs", []string{fmt.Sprintf(`href="/jobs/%d"`, ok), fmt.Sprintf(`href="/jobs/%d"`, bad), fmt.Sprintf(`href="/jobs/%d"`, future), "order-7", `action="/actions/bulk"`}, nil},
		{"/jobs?state=failed", []string{fmt.Sprintf(`href="/jobs/%d"`, bad), "400 Bad Request"}, []string{fmt.Sprintf(`href="/jobs/%d"`, ok)}},
		{"/jobs?q=order-7", []string{fmt.Sprintf(`href="/jobs/%d"`, ok)}, []string{fmt.Sprintf(`href="/jobs/%d"`, bad)}},
		{"/jobs?target=partner.example&order=oldest", []string{fmt.Sprintf(`href="/jobs/%d"`, ok), fmt.Sprintf(`href="/jobs/%d"`, bad)}, []string{fmt.Sprintf(`href="/jobs/%d"`, future)}},
		{fmt.Sprintf("/jobs?q=%d", bad), []string{`id="exact"`, fmt.Sprintf(`Job <a href="/jobs/%d">`, bad)}, nil},
		{"/jobs?q=424242", nil, []string{`id="exact"`}},
		{"/jobs?kind=bad", []string{fmt.Sprintf(`href="/jobs/%d"`, bad)}, []string{fmt.Sprintf(`href="/jobs/%d"`, ok)}},
		{fmt.Sprintf("/jobs/%d", bad), []string{`id="job-state">failed<`, "400 Bad Request", `id="retry-button"`, "permanent", "&#34;n&#34;: 1"}, []string{`id="cancel-button"`}},
		{fmt.Sprintf("/jobs/%d", future), []string{`id="job-state">pending<`, `id="next-attempt"`, `id="cancel-button"`, "No attempt yet"}, []string{`id="retry-button"`}},
		{"/failed", []string{fmt.Sprintf(`href="/jobs/%d"`, bad), fmt.Sprintf(`formaction="/jobs/%d/retry"`, bad), "Dead letters", `action="/actions/retry-matching"`, "Retry all 2 failed jobs", `id="groups"`, `data-groups="reason"`, `action="/actions/retry-group"`, `data-tab="failed" aria-current="page"`}, []string{fmt.Sprintf(`href="/jobs/%d"`, ok)}},
		{"/targets", []string{`data-target="partner.example"`, `data-target="flaky.example"`, `<svg class="chart"`, "0 ok · 3 failed", "1 ok · 1 failed", "data-pending>"}, []string{"see jobs"}},
		{"/logout", []string{"nothing to log out of"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, body := b.get(tt.path)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %d, want 200\n%s", tt.path, res.StatusCode, body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Errorf("Content-Security-Policy %q does not restrict scripts", csp)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("GET %s: body lacks %q", tt.path, w)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(body, w) {
					t.Errorf("GET %s: body has %q", tt.path, w)
				}
			}
		})
	}
}

// targetsSeen counts the targets the runner lists and the recorder saw.
func targetsSeen(t *testing.T, b *bundle) int {
	st, err := b.runner.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{"partner.example": true, "flaky.example": true} // the recorder saw both
	for _, ts := range st.Targets {
		seen[ts.Target] = true
	}
	for _, name := range b.rec.Targets() {
		seen[name] = true
	}
	return len(seen)
}

func TestStatic(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	_, page := b.get("/")
	for name, ctype := range map[string]string{"htmx-2.0.4.min.js": "text/javascript", "style.css": "text/css", "dashboard.js": "text/javascript"} {
		u, err := asset(name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(page, u) {
			t.Errorf("the page does not link %s", u)
		}
		res, body := b.get(u)
		if res.StatusCode != http.StatusOK || len(body) == 0 {
			t.Fatalf("GET %s: %d, %d bytes", u, res.StatusCode, len(body))
		}
		if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", u, ct, ctype)
		}
		if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, "immutable") {
			t.Errorf("GET %s: Cache-Control %q, want immutable for the current version", u, cc)
		}
		res, _ = b.get("/static/" + name)
		if cc := res.Header.Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET /static/%s without version: Cache-Control %q, want no-cache", name, cc)
		}
	}
	if _, err := asset("nope.js"); err == nil {
		t.Error("asset of a missing file: no error")
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	tests := []struct {
		method, path string
		status       int
	}{
		{"GET", "/jobs?state=bogus", http.StatusBadRequest},
		{"GET", "/jobs?order=sideways", http.StatusBadRequest},
		{"GET", "/jobs?after=x", http.StatusBadRequest},
		{"GET", "/jobs?kind=" + strings.Repeat("k", maxFilterLen+1), http.StatusBadRequest},
		{"GET", "/jobs/abc", http.StatusBadRequest},
		{"GET", "/jobs/-1", http.StatusBadRequest},
		{"GET", "/jobs/99999999999999999999999", http.StatusBadRequest},
		{"GET", "/jobs/424242", http.StatusNotFound},
		{"GET", "/nope", http.StatusNotFound},
		{"GET", "/v1/jobs", http.StatusNotFound},
		{"GET", "/metrics", http.StatusNotFound},
		{"GET", "/healthz", http.StatusNotFound},
		{"DELETE", "/jobs", http.StatusMethodNotAllowed},
		{"POST", "/jobs/424242/retry", http.StatusNotFound},
		{"POST", "/jobs/abc/cancel", http.StatusBadRequest},
		{"POST", "/actions/bulk?x=1", http.StatusSeeOther}, // nothing selected: back with a message
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var res *http.Response
			var body string
			if tt.method == "POST" {
				res, body = b.post(tt.path, nil)
			} else {
				req, _ := http.NewRequest(tt.method, tt.path, nil)
				res, body = b.do(req)
			}
			if res.StatusCode != tt.status {
				t.Fatalf("%s %s: %d, want %d\n%s", tt.method, tt.path, res.StatusCode, tt.status, body)
			}
		})
	}
	res, body := b.post("/actions/bulk", url.Values{"id": {"1"}, "action": {"explode"}})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "use retry, cancel or discard") {
		t.Errorf("unknown bulk action: %d\n%s", res.StatusCode, body)
	}
	ids := url.Values{"action": {"retry"}}
	for i := range MaxBulk + 1 {
		ids.Add("id", strconv.Itoa(i+1))
	}
	if res, _ := b.post("/actions/bulk", ids); res.StatusCode != http.StatusBadRequest {
		t.Errorf("bulk over MaxBulk: %d, want 400", res.StatusCode)
	}
}

// flash follows an action's redirect and returns the message the next page
// shows.
func (b *bundle) flash(res *http.Response) string {
	b.t.Helper()
	if res.StatusCode != http.StatusSeeOther {
		b.t.Fatalf("action answered %d, want 303", res.StatusCode)
	}
	var cookie string
	for _, c := range res.Cookies() {
		if c.Name == flashCookie {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				b.t.Errorf("flash cookie is not HttpOnly and SameSite=Strict: %+v", c)
			}
			cookie = c.Name + "=" + c.Value
		}
	}
	_, body := b.get(res.Header.Get("Location"), "Cookie", cookie)
	i := strings.Index(body, `id="flash">`)
	if i < 0 {
		b.t.Fatalf("the page after the action shows no message")
	}
	msg := body[i+len(`id="flash">`):]
	return msg[:strings.Index(msg, "<")]
}

func TestActions(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	ctx := context.Background()

	t.Run("retry one", func(t *testing.T) {
		id := b.enqueue("bad")
		b.waitState(id, runlog.StateFailed)
		res, _ := b.post(fmt.Sprintf("/jobs/%d/retry", id), nil)
		if loc := res.Header.Get("Location"); loc != fmt.Sprintf("/jobs/%d", id) {
			t.Errorf("redirect to %q, want the job page", loc)
		}
		if msg := b.flash(res); !strings.Contains(msg, "will run again") {
			t.Errorf("message %q", msg)
		}
		j := b.waitState(id, runlog.StateFailed) // it ran again and failed again
		if len(j.History) != 2 {
			t.Errorf("job has %d attempts after the retry, want 2", len(j.History))
		}
		// Retrying a job that is not failed says so.
		ok := b.enqueue("ok")
		b.waitState(ok, runlog.StateSucceeded)
		res, _ = b.post(fmt.Sprintf("/jobs/%d/retry", ok), url.Values{"back": {"/failed"}})
		if loc := res.Header.Get("Location"); loc != "/failed" {
			t.Errorf("redirect to %q, want the back field /failed", loc)
		}
		if msg := b.flash(res); !strings.Contains(msg, "not failed") {
			t.Errorf("message %q", msg)
		}
	})

	t.Run("replay one", func(t *testing.T) {
		id := b.enqueue("ok", runlog.WithMetadata(map[string]string{"tenant": "acme"}))
		b.waitState(id, runlog.StateSucceeded)
		_, page := b.get(fmt.Sprintf("/jobs/%d", id))
		if !strings.Contains(page, `id="replay-button"`) || !strings.Contains(page, "<dt>tenant</dt>") || !strings.Contains(page, ">acme<") {
			t.Fatalf("the page of a succeeded job with metadata lacks the replay button or the metadata")
		}
		res, _ := b.post(fmt.Sprintf("/jobs/%d/replay", id), nil)
		loc := res.Header.Get("Location")
		nid, err := strconv.ParseUint(strings.TrimPrefix(loc, "/jobs/"), 10, 64)
		if err != nil || nid == id {
			t.Fatalf("replay redirects to %q, want the new job's page", loc)
		}
		if msg := b.flash(res); !strings.Contains(msg, fmt.Sprintf("replay of job %d", id)) {
			t.Errorf("message %q", msg)
		}
		j := b.waitState(nid, runlog.StateSucceeded)
		if j.ReplayOf != id {
			t.Errorf("the new job replays %d, want %d", j.ReplayOf, id)
		}
		if _, page := b.get(loc); !strings.Contains(page, fmt.Sprintf(`id="job-replay-of"><a href="/jobs/%d"`, id)) {
			t.Errorf("the replay's page does not link to job %d", id)
		}
		// A pending job has no replay button, and a replay of it says why.
		later := b.enqueue("ok", runlog.RunIn(time.Hour))
		if _, page := b.get(fmt.Sprintf("/jobs/%d", later)); strings.Contains(page, `id="replay-button"`) {
			t.Errorf("a pending job's page offers a replay")
		}
		res, _ = b.post(fmt.Sprintf("/jobs/%d/replay", later), nil)
		if msg := b.flash(res); !strings.Contains(msg, "not replayed") {
			t.Errorf("message %q", msg)
		}
	})

	t.Run("cancel one", func(t *testing.T) {
		id := b.enqueue("ok", runlog.RunIn(time.Hour))
		res, _ := b.post(fmt.Sprintf("/jobs/%d/cancel", id), url.Values{"reason": {"customer left"}, "back": {"https://evil.example/"}})
		if loc := res.Header.Get("Location"); loc != "/" {
			t.Errorf("redirect to %q: a back field off the dashboard must become /", loc)
		}
		if msg := b.flash(res); !strings.Contains(msg, "cancelled") {
			t.Errorf("message %q", msg)
		}
		j := b.waitState(id, runlog.StateCancelled)
		if j.Reason != "customer left" {
			t.Errorf("reason %q", j.Reason)
		}
		res, _ = b.post(fmt.Sprintf("/jobs/%d/cancel", id), nil)
		if msg := b.flash(res); !strings.Contains(msg, "already finished") {
			t.Errorf("second cancel: message %q", msg)
		}
	})

	t.Run("cancel running", func(t *testing.T) {
		id := b.enqueue("slow")
		b.waitState(id, runlog.StateRunning)
		res, _ := b.post(fmt.Sprintf("/jobs/%d/cancel", id), nil)
		b.flash(res)
		j := b.waitState(id, runlog.StateCancelled)
		if j.Reason != "cancelled from the dashboard" {
			t.Errorf("reason %q", j.Reason)
		}
	})

	t.Run("bulk", func(t *testing.T) {
		var pending []string
		for range 3 {
			pending = append(pending, strconv.FormatUint(b.enqueue("ok", runlog.RunIn(time.Hour)), 10))
		}
		done := b.enqueue("ok")
		b.waitState(done, runlog.StateSucceeded)
		form := url.Values{"action": {"cancel"}, "id": append(pending, strconv.FormatUint(done, 10)), "back": {"/jobs?state=pending"}}
		res, _ := b.post("/actions/bulk", form)
		if loc := res.Header.Get("Location"); loc != "/jobs?state=pending" {
			t.Errorf("redirect to %q", loc)
		}
		if msg, want := b.flash(res), "Cancelled 3 jobs; 1 skipped (already finished, or gone)."; msg != want {
			t.Errorf("message %q, want %q", msg, want)
		}
		form.Set("action", "retry")
		res, _ = b.post("/actions/bulk", form)
		if msg, want := b.flash(res), "Retried 3 jobs; 1 skipped (not failed or cancelled, or gone)."; msg != want {
			t.Errorf("message %q, want %q", msg, want)
		}
		for _, s := range pending {
			id, _ := strconv.ParseUint(s, 10, 64)
			b.waitState(id, runlog.StateSucceeded)
		}
	})

	t.Run("retry matching", func(t *testing.T) {
		var a, other []uint64
		for range 4 {
			a = append(a, b.enqueue("bad", runlog.Target("a.example")))
		}
		other = append(other, b.enqueue("bad", runlog.Target("b.example")))
		for _, id := range append(a, other...) {
			b.waitState(id, runlog.StateFailed)
		}
		res, _ := b.post("/actions/retry-matching", url.Values{"target": {"a.example"}})
		if msg, want := b.flash(res), "Retried 4 jobs."; msg != want {
			t.Errorf("message %q, want %q", msg, want)
		}
		for _, id := range a {
			j := b.waitState(id, runlog.StateFailed)
			if len(j.History) != 2 {
				t.Errorf("job %d on the filtered target has %d attempts, want 2", id, len(j.History))
			}
		}
		j, err := b.runner.Job(ctx, other[0])
		if err != nil || len(j.History) != 1 {
			t.Errorf("job %d off the filter was retried: %d attempts, %v", other[0], len(j.History), err)
		}
		res, body := b.post("/actions/retry-matching", url.Values{"state": {"bogus"}})
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("bad filter: %d\n%s", res.StatusCode, body)
		}
	})
}

func TestCrossSiteRefused(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "s3cret"} {
		t.Run(fmt.Sprintf("token=%v", token != ""), func(t *testing.T) {
			b := setup(t, Options{Token: token})
			id := b.enqueue("ok", runlog.RunIn(time.Hour))
			path := fmt.Sprintf("/jobs/%d/cancel", id)
			cookie := b.session()
			tests := []struct {
				name string
				form url.Values
				hdr  []string
			}{
				{"cross-site fetch", nil, []string{"Sec-Fetch-Site", "cross-site", "Cookie", cookie}},
				{"same-site other origin", nil, []string{"Sec-Fetch-Site", "same-site", "Cookie", cookie}},
				{"foreign origin", nil, []string{"Origin", "https://evil.example", "Cookie", cookie}},
				{"no CSRF token", url.Values{csrfField: {""}}, []string{"Cookie", cookie}},
				{"wrong CSRF token", url.Values{csrfField: {"0123"}}, []string{"Cookie", cookie}},
				{"wrong CSRF header", url.Values{csrfField: {""}}, []string{"Cookie", cookie, csrfHeader, "0123"}},
			}
			for _, tt := range tests {
				res, body := b.post(path, tt.form, tt.hdr...)
				if res.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %d, want 403\n%s", tt.name, res.StatusCode, body)
				}
			}
			if j, _ := b.runner.Job(context.Background(), id); j.State != runlog.StatePending {
				t.Fatalf("a refused action changed the job: %s", j.State)
			}
			// The same request from the dashboard itself goes through, with
			// the token in the htmx header or in the form.
			res, _ := b.post(path, url.Values{csrfField: {""}}, "Cookie", cookie, "Sec-Fetch-Site", "same-origin",
				"Origin", "http://example.com", csrfHeader, b.csrf())
			if res.StatusCode != http.StatusSeeOther {
				t.Fatalf("same-origin action: %d, want 303", res.StatusCode)
			}
			b.waitState(id, runlog.StateCancelled)
		})
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	b := setup(t, Options{Token: token})
	id := b.enqueue("ok", runlog.RunIn(time.Hour))

	// Every page but the login page and the assets needs the session.
	for _, p := range []string{"/", "/jobs?state=pending", "/failed", "/targets", fmt.Sprintf("/jobs/%d", id), "/logout"} {
		res, _ := b.get(p)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login?next="+url.QueryEscape(p) {
			t.Errorf("GET %s without a session: %d to %q, want 303 to the login page", p, res.StatusCode, res.Header.Get("Location"))
		}
	}
	if res, _ := b.get("/", "HX-Request", "true"); res.StatusCode != http.StatusUnauthorized || res.Header.Get("HX-Redirect") != "/login?next=%2F" {
		t.Errorf("htmx request without a session: %d, HX-Redirect %q", res.StatusCode, res.Header.Get("HX-Redirect"))
	}
	if res, _ := b.post(fmt.Sprintf("/jobs/%d/cancel", id), nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("action without a session: %d, want 401", res.StatusCode)
	}
	u, _ := asset("style.css")
	if res, _ := b.get(u); res.StatusCode != http.StatusOK {
		t.Errorf("asset without a session: %d, want 200", res.StatusCode)
	}
	res, body := b.get("/login?next=%2Ffailed")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `name="token"`) || !strings.Contains(body, `value="/failed"`) {
		t.Fatalf("login form: %d\n%s", res.StatusCode, body)
	}
	if strings.Contains(body, csrfHeader) {
		t.Error("the login page shows the CSRF token to a visitor who is not logged in")
	}

	// A wrong token is refused and sets no cookie.
	res, body = b.post("/login", url.Values{"token": {"guess"}, "next": {"/failed"}})
	if res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 || !strings.Contains(body, "not the server") {
		t.Errorf("wrong token: %d, cookies %v", res.StatusCode, res.Cookies())
	}
	// The right one sets the session cookie and goes to next.
	res, _ = b.post("/login", url.Values{"token": {token}, "next": {"/failed"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/failed" {
		t.Fatalf("login: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Path != "/" {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path=/", session)
	}
	if strings.Contains(session.Value, token) {
		t.Error("the session cookie holds the token in clear")
	}
	cookie := "Cookie"
	jar := session.Name + "=" + session.Value
	res, body = b.get("/", cookie, jar)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, "Log out") {
		t.Errorf("GET / with the session: %d", res.StatusCode)
	}
	csrf := csrfOf(t, body)
	if res, _ := b.get("/", cookie, sessionCookie+"=forged"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / with a forged session: %d, want 303", res.StatusCode)
	}
	// The API's bearer header works too (curl, scripts).
	if res, _ := b.get("/targets", "Authorization", "Bearer "+token); res.StatusCode != http.StatusOK {
		t.Errorf("GET with the bearer token: %d", res.StatusCode)
	}
	if res, _ := b.get("/targets", "Authorization", "Bearer nope"); res.StatusCode != http.StatusSeeOther {
		t.Errorf("GET with a wrong bearer token: %d", res.StatusCode)
	}
	// Logged in, an action works.
	res, _ = b.post(fmt.Sprintf("/jobs/%d/cancel", id), url.Values{csrfField: {csrf}}, cookie, jar)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("action with the session: %d", res.StatusCode)
	}
	b.waitState(id, runlog.StateCancelled)
	// Logout clears the cookie.
	res, _ = b.post("/logout", url.Values{csrfField: {csrf}}, cookie, jar)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/login" {
		t.Errorf("logout: %d to %q", res.StatusCode, res.Header.Get("Location"))
	}
	cleared := false
	for _, c := range res.Cookies() {
		cleared = cleared || c.Name == sessionCookie && c.MaxAge < 0
	}
	if !cleared {
		t.Error("logout did not clear the session cookie")
	}
	// The session ended on the server: the old cookie is refused.
	if res, _ := b.get("/", cookie, jar); res.StatusCode != http.StatusSeeOther {
		t.Errorf("GET / with the cookie of a session that logged out: %d, want 303 to the login page", res.StatusCode)
	}
	// Sessions live in the server's memory: a restart ends them.
	if newAuth(token, time.Now, nil).authorized(reqWithCookie(jar)) {
		t.Error("a session from before a restart is accepted")
	}
}

func reqWithCookie(c string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Cookie", c)
	return r
}

func TestNoToken(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	res, _ := b.get("/login")
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" {
		t.Errorf("GET /login without a token: %d to %q, want 303 to /", res.StatusCode, res.Header.Get("Location"))
	}
	if _, body := b.get("/"); strings.Contains(body, "Log out") {
		t.Error("a dashboard without a token offers to log out")
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{ReadOnly: true})
	bad := b.enqueue("bad")
	pending := b.enqueue("ok", runlog.RunIn(time.Hour))
	b.waitState(bad, runlog.StateFailed)
	for _, p := range []string{"/", "/jobs", "/failed", fmt.Sprintf("/jobs/%d", bad), fmt.Sprintf("/jobs/%d", pending)} {
		res, body := b.get(p)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", p, res.StatusCode)
		}
		for _, hidden := range []string{"retry-button", "cancel-button", "replay-button", `name="action"`, "/actions/retry-matching", `name="id"`, "data-retry"} {
			if strings.Contains(body, hidden) {
				t.Errorf("GET %s on a read-only dashboard shows %q", p, hidden)
			}
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("GET %s does not say the dashboard is read-only", p)
		}
	}
	for _, a := range []struct {
		path string
		form url.Values
	}{
		{fmt.Sprintf("/jobs/%d/retry", bad), nil},
		{fmt.Sprintf("/jobs/%d/replay", bad), nil},
		{fmt.Sprintf("/jobs/%d/cancel", pending), nil},
		{"/actions/bulk", url.Values{"action": {"cancel"}, "id": {strconv.FormatUint(pending, 10)}}},
		{"/actions/retry-matching", nil},
	} {
		if res, _ := b.post(a.path, a.form); res.StatusCode != http.StatusForbidden {
			t.Errorf("POST %s on a read-only dashboard: %d, want 403", a.path, res.StatusCode)
		}
	}
	if j, _ := b.runner.Job(context.Background(), pending); j.State != runlog.StatePending {
		t.Errorf("read-only: pending job is now %s", j.State)
	}
	if j, _ := b.runner.Job(context.Background(), bad); len(j.History) != 1 {
		t.Errorf("read-only: failed job ran again")
	}
}

func TestPaging(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	reqs := make([]runlog.JobRequest, 120)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "ok", RunAt: time.Now().Add(time.Hour), Key: fmt.Sprintf("k-%03d", i)}
	}
	if _, err := b.runner.EnqueueMany(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	path := "/jobs?state=pending&order=oldest"
	for pages := 0; path != ""; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 50 for 120 jobs")
		}
		res, body := b.get(path)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		rows := strings.Count(body, "<tr data-job=")
		if want := min(PageSize, 120-len(seen)); rows != want {
			t.Errorf("page %d has %d rows, want %d", pages, rows, want)
		}
		for _, part := range strings.Split(body, "<tr data-job=\"")[1:] {
			id := part[:strings.Index(part, `"`)]
			if seen[id] {
				t.Errorf("job %s on two pages", id)
			}
			seen[id] = true
		}
		if pages > 0 && !strings.Contains(body, "« first page") {
			t.Errorf("page %d has no link to the first page", pages)
		}
		path = ""
		if i := strings.Index(body, `href="/jobs?after=`); i >= 0 {
			rest := body[i+len(`href="`):]
			path = strings.ReplaceAll(rest[:strings.Index(rest, `"`)], "&amp;", "&")
			if !strings.Contains(path, "state=pending") || !strings.Contains(path, "order=oldest") {
				t.Errorf("next link %q loses the filter", path)
			}
		}
	}
	if len(seen) != 120 {
		t.Errorf("paging showed %d jobs, want 120", len(seen))
	}
	_, body := b.get("/jobs?q=k-11")
	if n := strings.Count(body, "<tr data-job="); n != 10 { // k-011, k-110..k-119
		t.Errorf("search k-11: %d rows, want 10", n)
	}
}
