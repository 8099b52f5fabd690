package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

func TestNormalizeReason(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"target answered HTTP 400 Bad Request: order 1234 unknown": "target answered HTTP 400 Bad Request: order <n> unknown",
		"target answered HTTP 503 Service Unavailable":             "target answered HTTP 503 Service Unavailable",
		"dial tcp 10.0.0.7:8443: connect: connection refused":      "dial tcp <addr>: connect: connection refused",
		"dial tcp [2001:db8::1]:443: i/o timeout":                  "dial tcp <addr>: i/o timeout",
		"post https://api.example.com/v1/orders/991: EOF":          "post <url>: EOF",
		"request 3f2a9c1e-77b0-4c5e-9d1a-0b8e2f6a4c11 rejected":    "request <id> rejected",
		"trace 5f3a9b2c77d1e0f4 failed after 2.5s":                 "trace <id> failed after <n>s",
		"bad   request\n":                      "bad request",
		"":                                     "(no reason)",
		"deadbeef is a word, and so is facade": "deadbeef is a word, and so is facade",
		"exit status 2: resize: image 7 of 12 too large (40961234 bytes)": "exit status <n>: resize: image <n> of <n> too large (<n> bytes)",
	} {
		if got := normalizeReason(in); got != want {
			t.Errorf("normalizeReason(%q) = %q, want %q", in, got, want)
		}
	}
	// Jobs that failed the same way share a key.
	a := normalizeReason("target answered HTTP 400 Bad Request: order 17 is not known here")
	b := normalizeReason("target answered HTTP 400 Bad Request: order 4242 is not known here")
	if a != b {
		t.Errorf("same failure, two keys: %q, %q", a, b)
	}
}

func TestNaturalCompare(t *testing.T) {
	t.Parallel()
	got := []string{"host10", "host2", "host1", "a", "host02", "b1x", "b1", "https://s10.example", "https://s9.example"}
	slices.SortFunc(got, naturalCompare)
	want := []string{"a", "b1", "b1x", "host1", "host2", "host02", "host10", "https://s9.example", "https://s10.example"}
	if !slices.Equal(got, want) {
		t.Errorf("natural order %q, want %q", got, want)
	}
}

func TestLiveBreaker(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	open := runlog.TargetStats{Target: "x", State: "open", OpenUntil: now.Add(time.Second)}
	if got := liveBreaker(open, now).State; got != "open" {
		t.Errorf("breaker open until later reads %q", got)
	}
	if got := liveBreaker(open, now.Add(2*time.Second)).State; got != "half-open" {
		t.Errorf("breaker whose cooldown ended reads %q, want half-open", got)
	}
}

// TestTriageGroups: the failed page groups the failed jobs by normalized
// reason, kind and target with counts, and a group's retry retries
// exactly its jobs.
func TestTriageGroups(t *testing.T) {
	t.Parallel()
	b := setupWith(t, map[string]runlog.Handler{
		"order": runlog.Handle(func(ctx context.Context, p []byte) error {
			return runlog.Permanent(fmt.Errorf("target answered HTTP 400 Bad Request: order %s is not known here", p))
		}),
		"auth": runlog.Handle(func(ctx context.Context, p []byte) error {
			return runlog.Permanent(errors.New("target answered HTTP 401 Unauthorized"))
		}),
	})
	ctx := context.Background()
	enq := func(kind, target string, n int) []uint64 {
		var ids []uint64
		for i := range n {
			id, err := b.runner.Enqueue(ctx, kind, []byte(fmt.Sprint(100+i)), runlog.Target(target))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	orders := enq("order", "a.example", 3)
	auths := enq("auth", "b.example", 2)
	for _, id := range append(slices.Clone(orders), auths...) {
		b.waitState(id, runlog.StateFailed)
	}
	res, body := b.get("/failed")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /failed: %d\n%s", res.StatusCode, body)
	}
	for _, want := range []string{
		`data-group="permanent failure: target answered HTTP 400 Bad Request: order &lt;n&gt; is not known here"`,
		`data-group="permanent failure: target answered HTTP 401 Unauthorized"`,
		`the newest 5 failed jobs`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/failed lacks %q\n%s", want, body[strings.Index(body, `id="groups"`):][:1500])
		}
	}
	// The reason group of the 400s counts 3 and comes first.
	i := strings.Index(body, `data-groups="reason"`)
	if i < 0 || !strings.Contains(body[i:], `data-group-count>3<`) {
		t.Errorf("the reason groups do not count 3 jobs for the 400s")
	}
	// Retry the group of the 400s: exactly those jobs run again.
	res, _ = b.post("/actions/retry-group", url.Values{"by": {"reason"}, "group": {"permanent failure: target answered HTTP 400 Bad Request: order <n> is not known here"}})
	if msg, want := b.flash(res), "Retried 3 jobs."; msg != want {
		t.Errorf("group retry says %q, want %q", msg, want)
	}
	for _, id := range orders {
		j := b.waitState(id, runlog.StateFailed)
		if len(j.History) != 2 {
			t.Errorf("job %d of the group has %d attempts, want 2", id, len(j.History))
		}
	}
	for _, id := range auths {
		j, _ := b.runner.Job(ctx, id)
		if len(j.History) != 1 {
			t.Errorf("job %d outside the group was retried", id)
		}
	}
	// By target, with the page's filter kept.
	res, _ = b.post("/actions/retry-group", url.Values{"by": {"target"}, "group": {"b.example"}, "kind": {"auth"}})
	if msg, want := b.flash(res), "Retried 2 jobs."; msg != want {
		t.Errorf("target group retry says %q, want %q", msg, want)
	}
	if res, _ := b.post("/actions/retry-group", url.Values{"by": {"colour"}, "group": {"x"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown grouping: %d, want 400", res.StatusCode)
	}
}

// TestTriageBounded: grouping reads the newest MaxGroupScan failed jobs,
// not the whole history, and says so.
func TestTriageBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("enqueues MaxGroupScan+1 jobs")
	}
	t.Parallel()
	b := setup(t, Options{})
	ctx := context.Background()
	reqs := make([]runlog.JobRequest, MaxGroupScan+1)
	for i := range reqs {
		reqs[i] = runlog.JobRequest{Kind: "bad", Payload: []byte(`{}`)}
	}
	var ids []uint64
	for i := 0; i < len(reqs); i += 1000 {
		res, err := b.runner.EnqueueMany(ctx, reqs[i:min(i+1000, len(reqs))])
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			ids = append(ids, r.ID)
		}
	}
	// Every job, not only the first and the last: the pool runs several at
	// once, so one in the middle may still be running when both have failed.
	for _, id := range ids {
		b.waitState(id, runlog.StateFailed)
	}
	_, body := b.get("/failed")
	if want := fmt.Sprintf("the newest %d failed jobs: more match", MaxGroupScan); !strings.Contains(body, want) {
		t.Errorf("/failed does not say the grouping is bounded (%q)", want)
	}
}

// TestPreviousPage: paging forward then back returns the same pages.
func TestPreviousPage(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	for range PageSize*2 + 5 {
		b.enqueue("ok", runlog.RunIn(time.Hour))
	}
	ids := func(body string) []string {
		var out []string
		for _, part := range strings.Split(body, `<tr data-job="`)[1:] {
			out = append(out, part[:strings.Index(part, `"`)])
		}
		return out
	}
	link := func(body, id string) string {
		i := strings.Index(body, `id="`+id+`"`)
		if i < 0 {
			return ""
		}
		j := strings.LastIndex(body[:i], `href="`)
		s := body[j+len(`href="`):]
		return strings.ReplaceAll(s[:strings.Index(s, `"`)], "&amp;", "&")
	}
	_, p1 := b.get("/jobs?state=pending")
	if link(p1, "prev-page") != "" {
		t.Error("the first page has a previous-page link")
	}
	_, p2 := b.get(link(p1, "next-page"))
	_, p3 := b.get(link(p2, "next-page"))
	if len(ids(p3)) != 5 || link(p3, "next-page") != "" {
		t.Fatalf("the last page lists %d jobs", len(ids(p3)))
	}
	_, back2 := b.get(link(p3, "prev-page"))
	if !slices.Equal(ids(back2), ids(p2)) {
		t.Errorf("previous of page 3 lists %v, page 2 listed %v", ids(back2), ids(p2))
	}
	_, back1 := b.get(link(back2, "prev-page"))
	if !slices.Equal(ids(back1), ids(p1)) || link(back1, "prev-page") != "" {
		t.Errorf("previous of page 2 lists %v, page 1 listed %v", ids(back1), ids(p1))
	}
}

// TestJobTimeline: the job page tells the job's story in order.
func TestJobTimeline(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	id := b.enqueue("retry")
	b.waitState(id, runlog.StateFailed)
	_, body := b.get(fmt.Sprintf("/jobs/%d", id))
	var kinds []string
	for _, part := range strings.Split(body, `data-event="`)[1:] {
		kinds = append(kinds, part[:strings.Index(part, `"`)])
	}
	// enqueued, 3 attempts (waits of a few ms are not shown), finished.
	want := []string{"enqueued", "attempt", "attempt", "attempt", "finished"}
	if !slices.Equal(kinds, want) {
		t.Errorf("timeline events %v, want %v", kinds, want)
	}
	if strings.Contains(body, "fix the request") {
		t.Error("a failed job's page tells to fix the request")
	}
	if !strings.Contains(body, `id="failed-hint"`) {
		t.Error("a failed job's page does not say what a retry does")
	}
}

// TestCancelMatching cancels every pending job of a filter.
func TestCancelMatching(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	var a []uint64
	for range 3 {
		a = append(a, b.enqueue("ok", runlog.RunIn(time.Hour), runlog.Target("a.example")))
	}
	other := b.enqueue("ok", runlog.RunIn(time.Hour), runlog.Target("b.example"))
	res, _ := b.post("/actions/cancel-matching", url.Values{"state": {"pending"}, "target": {"a.example"}})
	if msg, want := b.flash(res), "Cancelled 3 jobs."; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	for _, id := range a {
		b.waitState(id, runlog.StateCancelled)
	}
	if j, _ := b.runner.Job(context.Background(), other); j.State != runlog.StatePending {
		t.Errorf("job off the filter is %s", j.State)
	}
	if res, _ := b.post("/actions/cancel-matching", url.Values{"state": {"failed"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("cancel of failed jobs: %d, want 400", res.StatusCode)
	}
}

// TestEmptyStates: a page with nothing to show says what to run first.
func TestEmptyStates(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{})
	for path, want := range map[string]string{
		"/":        "runlog enqueue --url",
		"/jobs":    "runlog enqueue --url",
		"/failed":  "No failed job",
		"/targets": "runlog enqueue --url",
	} {
		if _, body := b.get(path); !strings.Contains(body, want) {
			t.Errorf("GET %s (nothing yet) lacks %q", path, want)
		}
	}
}

// setupWith is setup with extra kinds beside the test kinds.
func setupWith(t testing.TB, extra map[string]runlog.Handler) *bundle {
	t.Helper()
	rec := NewRecorder()
	handlers := testKinds()
	for k, h := range extra {
		handlers[k] = h
	}
	r, err := runlog.Open(t.TempDir(), runlog.Config{Handlers: handlers, Observer: rec, Logger: quietLogger(), SnapshotBytes: -1,
		Retry: runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	})
	opts := Options{Recorder: rec, Logger: quietLogger()}
	return &bundle{t: t, runner: r, rec: rec, handler: New(r, opts), opts: opts}
}

// BenchmarkNormalizeReason is the cost per distinct reason of the triage
// (a page groups up to MaxGroupScan jobs; repeated reasons are normalized
// once).
func BenchmarkNormalizeReason(b *testing.B) {
	reasons := []string{
		"permanent failure: target answered HTTP 400 Bad Request: not retried (the target refuses this request as it is, so the same request would be refused again)",
		"dial tcp 10.0.0.7:8443: connect: connection refused",
		"post https://api.example.com/v1/orders/991: read tcp 10.1.2.3:5555->10.0.0.7:443: i/o timeout",
		"request 3f2a9c1e-77b0-4c5e-9d1a-0b8e2f6a4c11 rejected: quota 1200 of 1000 used",
	}
	for i := 0; b.Loop(); i++ {
		normalizeReason(reasons[i%len(reasons)])
	}
}
