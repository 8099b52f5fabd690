package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/runlog/runlog"
)

// maxReason bounds the cancel reason typed in a form.
const maxReason = 500

// back is where an action returns: the form's "back" field when it is a
// dashboard path, else fallback.
func back(r *http.Request, fallback string) string {
	if b := r.PostForm.Get("back"); b != "" {
		return localPath(b)
	}
	return fallback
}

// done keeps msg for the next page and sends the browser there (post,
// redirect, get: a reload does not repeat the action).
func done(w http.ResponseWriter, r *http.Request, to, msg string) {
	setFlash(w, r, msg)
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (h *handler) retryOne(w http.ResponseWriter, r *http.Request) {
	h.oneJob(w, r, jobAction{
		do:      func(r *http.Request, id uint64) error { return h.runner.Retry(r.Context(), id) },
		refused: runlog.ErrNotFailed, notDone: "Job %d was not retried: it is not failed or cancelled.",
		logged: "dashboard: job retried", done: "Job %d will run again.",
	})
}

// replayOne re-sends a finished job as a new job (Runner.Replay) and shows
// the new job's page.
func (h *handler) replayOne(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	nid, err := h.runner.Replay(r.Context(), id)
	if err != nil {
		if errors.Is(err, runlog.ErrNotReplayable) {
			done(w, r, "/jobs/"+strconv.FormatUint(id, 10), fmt.Sprintf("Job %d was not replayed: it has not finished.", id))
			return
		}
		h.engineError(w, r, err)
		return
	}
	h.log.Info("dashboard: job replayed", "id", id, "new", nid, "remote", r.RemoteAddr)
	done(w, r, "/jobs/"+strconv.FormatUint(nid, 10), fmt.Sprintf("Job %d is a replay of job %d.", nid, id))
}

func (h *handler) cancelOne(w http.ResponseWriter, r *http.Request) {
	h.oneJob(w, r, jobAction{
		do:      func(r *http.Request, id uint64) error { return h.runner.Cancel(r.Context(), id, cancelReason(r)) },
		refused: runlog.ErrFinished, notDone: "Job %d was not cancelled: it has already finished.",
		logged: "dashboard: job cancelled", done: "Job %d is cancelled.",
	})
}

// discardOne removes a finished job for good and shows the jobs of its
// state (its own page is gone).
func (h *handler) discardOne(w http.ResponseWriter, r *http.Request) {
	h.oneJob(w, r, jobAction{
		do:      func(r *http.Request, id uint64) error { return h.runner.Discard(r.Context(), id) },
		refused: runlog.ErrNotFinished, notDone: "Job %d was not discarded: it has not finished (cancel it first).",
		logged: "dashboard: job discarded", done: "Job %d is discarded.", to: "/jobs",
	})
}

// jobAction is what a button on one job does and says.
type jobAction struct {
	do      func(r *http.Request, id uint64) error
	refused error  // the engine's error when the job's state does not allow it
	notDone string // the flash then (with the job's id)
	logged  string // the log line when it is done
	done    string // the flash then (with the job's id)
	to      string // where to go when done instead of the job's page (it is gone)
}

// oneJob runs a on the job of the path and returns to the page the form
// came from (the job's page by default) with a flash saying what happened.
func (h *handler) oneJob(w http.ResponseWriter, r *http.Request, a jobAction) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	to := back(r, "/jobs/"+strconv.FormatUint(id, 10))
	if err := a.do(r, id); err != nil {
		if errors.Is(err, a.refused) {
			done(w, r, to, fmt.Sprintf(a.notDone, id))
			return
		}
		h.engineError(w, r, err)
		return
	}
	h.log.Info(a.logged, "id", id, "remote", r.RemoteAddr)
	if a.to != "" && to == "/jobs/"+strconv.FormatUint(id, 10) {
		to = a.to // the job's page is gone
	}
	done(w, r, to, fmt.Sprintf(a.done, id))
}

// cancelReason is the form's reason, bounded, or a default naming the
// dashboard.
func cancelReason(r *http.Request) string {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		return "cancelled from the dashboard"
	}
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "")
	}
	return reason
}

// tally counts the results of a bulk action for its report.
type tally struct {
	ok, skipped, failed int
	firstErr            error
}

func (t *tally) add(err error, skip error) {
	switch {
	case err == nil:
		t.ok++
	case errors.Is(err, skip) || errors.Is(err, runlog.ErrNotFound):
		t.skipped++
	default:
		t.failed++
		if t.firstErr == nil {
			t.firstErr = err
		}
	}
}

// report says what a bulk action did, e.g. "Retried 3 jobs; 1 skipped (not
// failed or cancelled, or gone)."
func (t tally) report(verb, skipWhy string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d %s", verb, t.ok, plural(t.ok, "job", "jobs"))
	if t.skipped > 0 {
		fmt.Fprintf(&b, "; %d skipped (%s)", t.skipped, skipWhy)
	}
	if t.failed > 0 {
		fmt.Fprintf(&b, "; %d failed: %v", t.failed, t.firstErr)
	}
	b.WriteString(".")
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// bulk retries, cancels or discards the selected jobs (form fields "id",
// "action").
func (h *handler) bulk(w http.ResponseWriter, r *http.Request) {
	raw := r.PostForm["id"]
	to := back(r, "/jobs")
	if len(raw) == 0 {
		done(w, r, to, "No job was selected: tick the jobs first.")
		return
	}
	if len(raw) > MaxBulk {
		h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("%d jobs were selected; one action takes at most %d.", len(raw), MaxBulk))
		return
	}
	ids := make([]uint64, 0, len(raw))
	for _, s := range raw {
		id, err := parseID(s)
		if err != nil {
			h.errorPage(w, r, http.StatusBadRequest, err.Error())
			return
		}
		ids = append(ids, id)
	}
	a, ok := h.manyAction(r, r.PostForm.Get("action"))
	if !ok {
		h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("unknown action %q: use retry, cancel or discard", r.PostForm.Get("action")))
		return
	}
	t := a.apply(r, ids)
	if t.failed > 0 {
		h.log.Error("dashboard: bulk action", "action", a.name, "ok", t.ok, "failed", t.failed, "err", t.firstErr)
	}
	h.log.Info("dashboard: bulk action", "action", a.name, "ok", t.ok, "skipped", t.skipped, "remote", r.RemoteAddr)
	done(w, r, to, t.report(a.verb, a.skipWhy))
}
