package dashboard

import (
	"context"
	"fmt"
	"net/http"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/walk"
)

// manyAction is what an action over many jobs (the selected ones, a
// filter, a group of failed jobs) does to each, and says.
type manyAction struct {
	name    string // "retry", "cancel", "discard"
	verb    string // "Retried" …, for the report
	noun    string // "retries" …, for the bound's message
	do      func(ctx context.Context, id uint64) error
	skip    error  // the engine's error when the job's state no longer allows it
	skipWhy string // the report's reason for the skipped ones
	// states are the states a filter may select for it (the first is the
	// default when the filter names none).
	states []runlog.State
}

// manyAction returns the action name does to each job of r's form (a
// cancel takes the form's reason).
func (h *handler) manyAction(r *http.Request, name string) (manyAction, bool) {
	switch name {
	case "retry":
		return manyAction{name: name, verb: "Retried", noun: "retries", do: h.runner.Retry, skip: runlog.ErrNotFailed,
			skipWhy: "not failed or cancelled, or gone", states: []runlog.State{runlog.StateFailed}}, true
	case "cancel":
		reason := cancelReason(r)
		return manyAction{name: name, verb: "Cancelled", noun: "cancels", skip: runlog.ErrFinished, skipWhy: "already finished, or gone",
			do:     func(ctx context.Context, id uint64) error { return h.runner.Cancel(ctx, id, reason) },
			states: []runlog.State{runlog.StatePending, runlog.StateRunning}}, true
	case "discard":
		return manyAction{name: name, verb: "Discarded", noun: "discards", do: h.runner.Discard, skip: runlog.ErrNotFinished,
			skipWhy: "not finished, or gone", states: []runlog.State{runlog.StateFailed, runlog.StateSucceeded, runlog.StateCancelled}}, true
	}
	return manyAction{}, false
}

// actionForm returns the action name and the filter of r's form; on a bad
// filter it answers the error page and returns false.
func (h *handler) actionForm(w http.ResponseWriter, r *http.Request, name string) (manyAction, filter, bool) {
	a, _ := h.manyAction(r, name)
	f, err := parseFilter(r.PostForm)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return a, f, false
	}
	return a, f, true
}

// apply does a to each job of ids and counts the results.
func (a manyAction) apply(r *http.Request, ids []uint64) tally {
	var t tally
	for _, id := range ids {
		t.add(a.do(r.Context(), id), a.skip)
	}
	return t
}

// matching does the action name to every job matching the form's filter
// (state, kind, target, q), oldest first, at most MaxRetryMatching per
// request: the jobs are listed first (one bounded walk), then acted on.
// The filter's state must be one the action takes (retry: failed, the
// default; cancel: pending or running; discard: a finished state).
func (h *handler) matching(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, f, ok := h.actionForm(w, r, name)
		if !ok {
			return
		}
		if f.State == "" && a.name == "retry" {
			f.State = string(a.states[0])
		}
		if !stateIn(f.State, a.states) {
			h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("%s all matching takes state %s, not %q: pick the state's tab first", a.name, stateList(a.states), f.State))
			return
		}
		f.After, f.Before, f.Oldest = 0, 0, true
		res, err := walk.Collect(r.Context(), MaxRetryMatching, 0, func(ctx context.Context, after uint64, limit int) ([]uint64, uint64, error) {
			f.After = after
			page, err := h.runner.List(ctx, f.list(limit))
			ids := make([]uint64, len(page.Jobs))
			for i, j := range page.Jobs {
				ids[i] = j.ID
			}
			return ids, page.Next, err
		}, nil)
		if err != nil {
			h.engineError(w, r, err)
			return
		}
		t := a.apply(r, res.Items)
		msg := t.report(a.verb, a.skipWhy)
		if res.Over {
			msg += fmt.Sprintf(" More jobs match: this action %s at most %d at a time; run it again.", a.noun, MaxRetryMatching)
		}
		h.log.Info("dashboard: "+a.name+" of matching jobs", "state", f.State, "ok", t.ok, "skipped", t.skipped, "failed", t.failed, "more", res.Over, "remote", r.RemoteAddr)
		done(w, r, back(r, "/jobs"), msg)
	}
}

// group does the action name (retry or discard) to the failed jobs of
// one group of the failed page's triage (form fields "by": reason, kind
// or target, and "group": its key, plus the page's filter): the same
// bounded scan as the page, the newest MaxGroupScan failed jobs, so it
// acts on the jobs the page counted.
func (h *handler) group(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, f, ok := h.actionForm(w, r, name)
		if !ok {
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
		t := a.apply(r, ids)
		h.log.Info("dashboard: "+a.name+" of a group of failed jobs", "by", by, "ok", t.ok, "skipped", t.skipped, "failed", t.failed, "remote", r.RemoteAddr)
		msg := t.report(a.verb, "no longer failed")
		if len(ids) == 0 {
			msg = fmt.Sprintf("No failed job is left in this group: nothing was %s.", lower(a.verb))
		}
		done(w, r, back(r, "/failed"), msg)
	}
}

func stateIn(st string, states []runlog.State) bool {
	for _, s := range states {
		if string(s) == st {
			return true
		}
	}
	return false
}

// stateList names states for a message: "pending or running".
func stateList(states []runlog.State) string {
	out := ""
	for i, s := range states {
		switch {
		case i == 0:
		case i == len(states)-1:
			out += " or "
		default:
			out += ", "
		}
		out += string(s)
	}
	return out
}

// lower returns s with its first letter in lower case ("Retried" →
// "retried").
func lower(s string) string {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return s
	}
	return string(s[0]+'a'-'A') + s[1:]
}
