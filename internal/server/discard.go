package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/runlog/runlog"
)

// DiscardRequest is the body of POST /v1/discard: remove every finished
// job in State ("failed", "succeeded", "cancelled" or "any"; default any)
// of Kind and of Target (at least one of state, kind and target), or, with
// DryRun, count them.
type DiscardRequest struct {
	State  string `json:"state,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Target string `json:"target,omitempty"`
	DryRun bool   `json:"dry_run,omitempty"`
}

// Discarded is the answer of POST /v1/discard: how many jobs match (and,
// without dry_run, were discarded), and how many matched but had changed
// (retried, or dropped) by the time their turn came.
type Discarded struct {
	Count   int `json:"count"`
	Skipped int `json:"skipped,omitempty"`
}

// discard answers DELETE /v1/jobs/{id}: 204 once the finished job is gone.
func (a *API) discard(w http.ResponseWriter, r *http.Request) {
	id, ok := a.pathID(w, r)
	if !ok {
		return
	}
	if err := a.runner.Discard(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// discardMatching answers POST /v1/discard.
func (a *API) discardMatching(w http.ResponseWriter, r *http.Request) {
	var in DiscardRequest
	if !a.decodeBody(w, r, &in, `{"state": "failed|succeeded|cancelled|any", "kind": "...", "target": "...", "dry_run": true}`) {
		return
	}
	f, err := in.filter()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	res, err := a.runner.DiscardMatching(r.Context(), f)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !in.DryRun {
		a.cfg.Logger.Info("discarded jobs", "state", in.State, "kind", f.Kind, "target", f.Target, "count", res.Count, "skipped", res.Skipped)
	}
	writeJSON(w, http.StatusOK, Discarded{Count: res.Count, Skipped: res.Skipped})
}

// decodeBody reads the request's body and decodes it strictly into v
// (example shows what is expected); on an error it answers it and returns
// false.
func (a *API) decodeBody(w http.ResponseWriter, r *http.Request, v any, example string) bool {
	body, ok := a.readBody(w, r)
	if !ok {
		return false
	}
	if err := decodeStrict(body, v, example); err != nil {
		a.fail(w, r, err)
		return false
	}
	return true
}

// filter checks the request and returns the runner's filter.
func (in DiscardRequest) filter() (runlog.DiscardFilter, error) {
	if len(in.Target) > maxTargetLen {
		return runlog.DiscardFilter{}, badRequest("target is %d bytes, at most %d are allowed", len(in.Target), maxTargetLen)
	}
	if len(in.Kind) > maxTargetLen {
		return runlog.DiscardFilter{}, badRequest("kind is %d bytes, at most %d are allowed", len(in.Kind), maxTargetLen)
	}
	f := runlog.DiscardFilter{Kind: in.Kind, Target: in.Target, DryRun: in.DryRun}
	switch in.State {
	case "", "any":
	case "failed", "succeeded", "cancelled":
		f.State = runlog.State(in.State)
	default:
		return f, badRequest("state %q: use failed, succeeded, cancelled or any (a pending or running job cannot be discarded: cancel it first)", in.State)
	}
	if in.State == "" && in.Kind == "" && in.Target == "" {
		return f, badRequest("name the jobs to discard: a state, a kind or a target")
	}
	return f, nil
}

// Discard removes the finished job id for good (DELETE /v1/jobs/{id}).
func (c *Client) Discard(ctx context.Context, id uint64) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/jobs/"+strconv.FormatUint(id, 10), nil, nil)
	return err
}

// DiscardMatching removes (or, with DryRun, counts) the finished jobs of a
// filter (POST /v1/discard).
func (c *Client) DiscardMatching(ctx context.Context, in DiscardRequest) (Discarded, error) {
	var out Discarded
	body, err := json.Marshal(in)
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/discard", body, &out)
	return out, err
}
