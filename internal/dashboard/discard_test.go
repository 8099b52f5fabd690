package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestDiscardActions: a finished job's page offers Discard and the button
// removes it (a pending one is refused, saying to cancel it first); the
// failed page discards a whole group; a state tab discards every job of
// its filter; the bulk form discards the selected finished jobs only.
func TestDiscardActions(t *testing.T) {
	t.Parallel()
	b := setupWith(t, map[string]runlog.Handler{
		"order": runlog.Handle(func(ctx context.Context, p []byte) error {
			return runlog.Permanent(fmt.Errorf("target answered HTTP 400 Bad Request: order %s is not known here", p))
		}),
		"auth": runlog.Handle(func(ctx context.Context, p []byte) error {
			return runlog.Permanent(errors.New("target answered HTTP 401 Unauthorized"))
		}),
		"ok": runlog.Handle(func(ctx context.Context, p []byte) error { return nil }),
	})
	ctx := context.Background()
	enq := func(kind string, n int, opts ...runlog.EnqueueOption) []uint64 {
		var ids []uint64
		for i := range n {
			id, err := b.runner.Enqueue(ctx, kind, []byte(fmt.Sprint(100+i)), opts...)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	orders, auths, oks := enq("order", 3), enq("auth", 2), enq("ok", 3)
	later := enq("ok", 1, runlog.RunIn(time.Hour))[0]
	for _, id := range append(orders, auths...) {
		b.waitState(id, runlog.StateFailed)
	}
	for _, id := range oks {
		b.waitState(id, runlog.StateSucceeded)
	}
	gone := func(ids ...uint64) {
		t.Helper()
		for _, id := range ids {
			if _, err := b.runner.Job(ctx, id); !errors.Is(err, runlog.ErrNotFound) {
				t.Errorf("job %d is still there: %v", id, err)
			}
		}
	}
	kept := func(ids ...uint64) {
		t.Helper()
		for _, id := range ids {
			if _, err := b.runner.Job(ctx, id); err != nil {
				t.Errorf("job %d is gone: %v", id, err)
			}
		}
	}

	// One job: the button is on a finished job's page, not a pending one's.
	if _, body := b.get("/jobs/" + strconv.FormatUint(auths[0], 10)); !strings.Contains(body, `id="discard-button"`) {
		t.Error("a failed job's page has no Discard button")
	}
	if _, body := b.get("/jobs/" + strconv.FormatUint(later, 10)); strings.Contains(body, `id="discard-button"`) {
		t.Error("a pending job's page offers Discard")
	}
	res, _ := b.post("/jobs/"+strconv.FormatUint(later, 10)+"/discard", nil)
	if msg := b.flash(res); !strings.Contains(msg, "not discarded") || !strings.Contains(msg, "cancel it first") {
		t.Errorf("discard of a pending job says %q", msg)
	}
	kept(later)
	res, _ = b.post("/jobs/"+strconv.FormatUint(auths[0], 10)+"/discard", nil)
	if msg, want := b.flash(res), fmt.Sprintf("Job %d is discarded.", auths[0]); msg != want {
		t.Errorf("discard says %q, want %q", msg, want)
	}
	if loc := res.Header.Get("Location"); loc != "/jobs" {
		t.Errorf("after a discard the browser goes to %q, want /jobs (the job's page is gone)", loc)
	}
	gone(auths[0])

	// A group of the failed page: exactly its jobs go.
	_, body := b.get("/failed")
	if !strings.Contains(body, `data-discard-group="reason"`) {
		t.Error("the failed page's groups have no discard button")
	}
	res, _ = b.post("/actions/discard-group", url.Values{"by": {"reason"}, "group": {"permanent failure: target answered HTTP 400 Bad Request: order <n> is not known here"}})
	if msg, want := b.flash(res), "Discarded 3 jobs."; msg != want {
		t.Errorf("group discard says %q, want %q", msg, want)
	}
	gone(orders...)
	kept(auths[1])

	// The bulk form: a pending job among the selected ones is skipped.
	res, _ = b.post("/actions/bulk", url.Values{"action": {"discard"}, "id": {strconv.FormatUint(oks[0], 10), strconv.FormatUint(later, 10)}})
	if msg, want := b.flash(res), "Discarded 1 job; 1 skipped (not finished, or gone)."; msg != want {
		t.Errorf("bulk discard says %q, want %q", msg, want)
	}
	gone(oks[0])
	kept(later)

	// Every job of a state tab's filter; a tab of unfinished jobs is
	// refused.
	if _, body := b.get("/jobs?state=succeeded"); !strings.Contains(body, `id="discard-matching"`) {
		t.Error("the succeeded tab has no discard-all form")
	}
	if _, body := b.get("/jobs?state=pending"); strings.Contains(body, `id="discard-matching"`) {
		t.Error("the pending tab offers discard-all")
	}
	if res, _ := b.post("/actions/discard-matching", url.Values{"state": {"pending"}}); res.StatusCode != http.StatusBadRequest {
		t.Errorf("discard-matching of pending jobs: %d, want 400", res.StatusCode)
	}
	res, _ = b.post("/actions/discard-matching", url.Values{"state": {"succeeded"}, "kind": {"ok"}})
	if msg, want := b.flash(res), "Discarded 2 jobs."; msg != want {
		t.Errorf("discard-matching says %q, want %q", msg, want)
	}
	gone(oks...)
	kept(later, auths[1])
}
