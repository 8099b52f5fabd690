package server

import (
	"net/http"
	"time"

	"github.com/runlog/runlog"
)

// ReplayRequest is the body of POST /v1/replay: re-send every job of Target
// that finished at or after Since (RFC 3339) in State ("failed",
// "succeeded", "cancelled" or "any"; default any), or, with DryRun, count
// them.
type ReplayRequest struct {
	Target string `json:"target"`
	Since  string `json:"since"`
	State  string `json:"state,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// Replayed is the answer of POST /v1/replay: how many jobs match (and,
// without dry_run, were re-sent), and the new jobs' ids.
type Replayed struct {
	Count int      `json:"count"`
	IDs   []uint64 `json:"ids,omitempty"`
}

// replayJob answers POST /v1/jobs/{id}/replay: 201 with the new job.
func (a *API) replayJob(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r)
	if !ok {
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	if !onlySpace(body) {
		a.fail(w, r, badRequest("POST /v1/jobs/{id}/replay takes no body"))
		return
	}
	nid, err := a.runner.Replay(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	j, err := a.runner.Job(r.Context(), nid)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, jobView(j, true))
}

// replayMatching answers POST /v1/replay.
func (a *API) replayMatching(w http.ResponseWriter, r *http.Request) {
	var in ReplayRequest
	if !a.decodeBody(w, r, &in, `{"target": "...", "since": "RFC 3339", "state": "failed|succeeded|cancelled|any", "dry_run": true}`) {
		return
	}
	f, err := in.filter()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.runner.ReplayMatching(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !in.DryRun {
		a.cfg.Logger.Info("replayed jobs", "target", f.Target, "since", f.Since, "state", in.State, "count", res.Count)
	}
	writeJSON(w, http.StatusOK, Replayed{Count: res.Count, IDs: res.IDs})
}

// filter checks the request and returns the runner's filter.
func (in ReplayRequest) filter() (runlog.ReplayFilter, error) {
	if in.Target == "" {
		return runlog.ReplayFilter{}, badRequest("target is required: the target whose jobs to re-send")
	}
	if len(in.Target) > maxTargetLen {
		return runlog.ReplayFilter{}, badRequest("target is %d bytes, at most %d are allowed", len(in.Target), maxTargetLen)
	}
	since, err := time.Parse(time.RFC3339Nano, in.Since)
	if err != nil {
		return runlog.ReplayFilter{}, badRequest("since %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", in.Since)
	}
	f := runlog.ReplayFilter{Target: in.Target, Since: since, DryRun: in.DryRun}
	switch in.State {
	case "", "any":
	case "failed", "succeeded", "cancelled":
		f.State = runlog.State(in.State)
	default:
		return f, badRequest("state %q: use failed, succeeded, cancelled or any", in.State)
	}
	return f, nil
}
