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

// jobAction is what a button on one job does and says.
type jobAction struct {
	do      func(r *http.Request, id uint64) error
	refused error  // the engine's error when the job's state does not allow it
	notDone string // the flash then (with the job's id)
	logged  string // the log line when it is done
	done    string // the flash then (with the job's id)
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

// bulk cancels or retries the selected jobs (form fields "id", "action").
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
	var t tally
	var msg string
	switch action := r.PostForm.Get("action"); action {
	case "retry":
		for _, id := range ids {
			t.add(h.runner.Retry(r.Context(), id), runlog.ErrNotFailed)
		}
		msg = t.report("Retried", "not failed or cancelled, or gone")
	case "cancel":
		reason := cancelReason(r)
		for _, id := range ids {
			t.add(h.runner.Cancel(r.Context(), id, reason), runlog.ErrFinished)
		}
		msg = t.report("Cancelled", "already finished, or gone")
	default:
		h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("unknown action %q: use retry or cancel", action))
		return
	}
	if t.failed > 0 {
		h.log.Error("dashboard: bulk action", "action", r.PostForm.Get("action"), "ok", t.ok, "failed", t.failed, "err", t.firstErr)
	}
	h.log.Info("dashboard: bulk action", "action", r.PostForm.Get("action"), "ok", t.ok, "skipped", t.skipped, "remote", r.RemoteAddr)
	done(w, r, to, msg)
}

// retryMatching retries every failed job matching the form's filter (kind,
// target, q), paging through List, at most MaxRetryMatching per request.
func (h *handler) retryMatching(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.PostForm)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	f.State, f.After, f.Oldest = string(runlog.StateFailed), 0, true
	to := back(r, "/failed")
	var t tally
	more := false
	for {
		lf := f.list(min(1000, MaxRetryMatching-t.ok-t.skipped-t.failed))
		page, err := h.runner.List(r.Context(), lf)
		if err != nil {
			h.engineError(w, r, err)
			return
		}
		for _, j := range page.Jobs {
			t.add(h.runner.Retry(r.Context(), j.ID), runlog.ErrNotFailed)
		}
		if page.Next == 0 {
			break
		}
		if t.ok+t.skipped+t.failed >= MaxRetryMatching {
			more = true
			break
		}
		f.After = page.Next
	}
	msg := t.report("Retried", "no longer failed")
	if more {
		msg += fmt.Sprintf(" More failed jobs match: this action retries at most %d at a time; run it again.", MaxRetryMatching)
	}
	h.log.Info("dashboard: retried matching failed jobs", "ok", t.ok, "skipped", t.skipped, "failed", t.failed, "more", more, "remote", r.RemoteAddr)
	done(w, r, to, msg)
}

// retryGroup retries the failed jobs of one group of the failed page's
// triage (form fields "by": reason, kind or target, and "group": its key,
// plus the page's filter): the same bounded scan as the page, the newest
// MaxGroupScan failed jobs, so it acts on the jobs the page counted.
func (h *handler) retryGroup(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.PostForm)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	by, key := r.PostForm.Get("by"), r.PostForm.Get("group")
	var keyOf func(runlog.Job) string
	switch by {
	case "reason":
		keyOf = func(j runlog.Job) string { return normalizeReason(j.Reason) }
	case "kind":
		keyOf = func(j runlog.Job) string { return j.Kind }
	case "target":
		keyOf = func(j runlog.Job) string { return j.Target }
	default:
		h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("unknown grouping %q: use reason, kind or target", by))
		return
	}
	var ids []uint64
	if _, err := h.failedJobs(r.Context(), f, func(j runlog.Job) {
		if keyOf(j) == key {
			ids = append(ids, j.ID)
		}
	}); err != nil {
		h.engineError(w, r, err)
		return
	}
	var t tally
	for _, id := range ids {
		t.add(h.runner.Retry(r.Context(), id), runlog.ErrNotFailed)
	}
	h.log.Info("dashboard: retried a group of failed jobs", "by", by, "ok", t.ok, "skipped", t.skipped, "failed", t.failed, "remote", r.RemoteAddr)
	msg := t.report("Retried", "no longer failed")
	if len(ids) == 0 {
		msg = "No failed job is left in this group: nothing was retried."
	}
	done(w, r, back(r, "/failed"), msg)
}

// cancelMatching cancels every pending or running job matching the form's
// filter (state, kind, target, q), paging through List oldest first, at
// most MaxRetryMatching per request.
func (h *handler) cancelMatching(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r.PostForm)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if f.State != string(runlog.StatePending) && f.State != string(runlog.StateRunning) {
		h.errorPage(w, r, http.StatusBadRequest, "cancel all matching takes state pending or running: finished jobs cannot be cancelled")
		return
	}
	f.After, f.Before, f.Oldest = 0, 0, true
	reason := cancelReason(r)
	var t tally
	more := false
	for {
		page, err := h.runner.List(r.Context(), f.list(min(1000, MaxRetryMatching-t.ok-t.skipped-t.failed)))
		if err != nil {
			h.engineError(w, r, err)
			return
		}
		for _, j := range page.Jobs {
			t.add(h.runner.Cancel(r.Context(), j.ID, reason), runlog.ErrFinished)
		}
		if page.Next == 0 {
			break
		}
		if t.ok+t.skipped+t.failed >= MaxRetryMatching {
			more = true
			break
		}
		f.After = page.Next
	}
	msg := t.report("Cancelled", "already finished, or gone")
	if more {
		msg += fmt.Sprintf(" More jobs match: this action cancels at most %d at a time; run it again.", MaxRetryMatching)
	}
	h.log.Info("dashboard: cancelled matching jobs", "state", f.State, "ok", t.ok, "skipped", t.skipped, "failed", t.failed, "more", more, "remote", r.RemoteAddr)
	done(w, r, back(r, "/jobs"), msg)
}
