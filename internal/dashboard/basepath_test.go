package dashboard

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

func TestBasePathMountsEverythingUnderIt(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Token: "tok", BasePath: "/admin/runlog/"})
	id := b.enqueue("bad")
	b.waitState(id, "failed")

	// Outside the base: not the dashboard's.
	for _, p := range []string{"/jobs", "/admin/runlogx", "/admin"} {
		if res, _ := b.get(p); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, res.StatusCode)
		}
	}
	// Without a session: to the login page under the base, back to the page after.
	res, _ := b.get("/admin/runlog/jobs?state=failed")
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/admin/runlog/login?next="+url.QueryEscape("/jobs?state=failed") {
		t.Fatalf("GET without a session: %d to %q", res.StatusCode, loc)
	}
	res, body := b.get("/admin/runlog/login")
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `action="/admin/runlog/login"`) {
		t.Fatalf("login page: %d\n%s", res.StatusCode, body)
	}
	res, _ = b.post("/admin/runlog/login", url.Values{"token": {"tok"}, "next": {"/jobs"}, csrfField: {""}})
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/admin/runlog/jobs" {
		t.Fatalf("login: %d to %q", res.StatusCode, loc)
	}
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == sessionCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Path != "/admin/runlog" {
		t.Fatalf("session cookie %+v, want Path=/admin/runlog", cookie)
	}

	// Every page: its absolute links and assets are under the base.
	local := regexp.MustCompile(`(?:href|src|action|hx-get|hx-post)="(/[^"]*)"`)
	for _, page := range []string{"/admin/runlog", "/admin/runlog/", "/admin/runlog/jobs", "/admin/runlog/failed", "/admin/runlog/targets", "/admin/runlog/jobs/1"} {
		res, body := b.get(page, "Cookie", b.session())
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", page, res.StatusCode)
		}
		links := local.FindAllStringSubmatch(body, -1)
		if len(links) == 0 {
			t.Fatalf("GET %s: no local link", page)
		}
		for _, l := range links {
			if !strings.HasPrefix(l[1], "/admin/runlog/") {
				t.Errorf("GET %s: link %q is not under the base", page, l[1])
			}
		}
	}
	if res, _ := b.get("/admin/runlog/static/style.css"); res.StatusCode != http.StatusOK {
		t.Fatalf("asset under the base: %d", res.StatusCode)
	}
	// An action goes back under the base.
	res, _ = b.post("/admin/runlog/jobs/1/retry", url.Values{"back": {"/failed"}}, "Cookie", b.session())
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/admin/runlog/failed" {
		t.Fatalf("retry: %d to %q", res.StatusCode, loc)
	}
	b.waitState(id, "failed") // retried, and failed again
}
