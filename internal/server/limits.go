package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/runlog/runlog"
)

// LimitRequest is the body of PUT /v1/limits: a target's rate limit, set at
// run time (durably, overriding the server's --rate-limit flags), or a
// queue's (durably, replacing its --queue-rate-limit).
type LimitRequest struct {
	// Target names the target, as jobs name it; Queue names the queue
	// ("default" for the default one). Exactly one of them is given.
	Target string `json:"target,omitempty"`
	Queue  string `json:"queue,omitempty"`
	// Rate is in attempts per second (0.001 to 1,000,000); 0 removes the
	// limit (the target then has none, even under a --rate-limit default).
	Rate *float64 `json:"rate"`
	// Burst is how many attempts may start at once after a quiet time;
	// 1 if left out. It must be left out (or 0) when Rate is 0.
	Burst int `json:"burst,omitempty"`
}

// Limit is a target's rate limit as the API shows it: the answer of PUT
// /v1/limits, and part of each item of GET /v1/targets.
type Limit struct {
	Target string `json:"target,omitempty"`
	Queue  string `json:"queue,omitempty"`
	// Rate is in attempts per second; Burst the bucket's size.
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// maxTarget bounds a target's name, as the enqueue does.
const maxTarget = 1024

func (a *API) putLimit(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var in LimitRequest
	if err := decodeStrict(body, &in, `{"target": "...", "rate": 100, "burst": 10}`); err != nil {
		a.fail(w, r, err)
		return
	}
	switch {
	case in.Target != "" && in.Queue != "":
		a.fail(w, r, badRequest(`give either "target" or "queue", not both: one limit per request`))
		return
	case in.Queue != "":
		a.putQueueLimit(w, r, in)
		return
	case in.Target == "":
		a.fail(w, r, badRequest(`target is required (or queue): the target whose jobs the limit paces, as they name it (e.g. "http://127.0.0.1:9000"), or the queue whose jobs it paces (e.g. "default")`))
		return
	case len(in.Target) > maxTarget:
		a.fail(w, r, badRequest("target is %d bytes; at most %d", len(in.Target), maxTarget))
		return
	case in.Rate == nil:
		a.fail(w, r, badRequest(`rate is required: attempts per second, or 0 to remove the limit`))
		return
	}
	l := runlog.Limit{Rate: *in.Rate, Burst: in.Burst}
	if err := a.runner.SetLimit(r.Context(), in.Target, l); err != nil {
		a.fail(w, r, err)
		return
	}
	if l.Rate != 0 {
		l.Burst = max(l.Burst, 1)
	}
	a.cfg.Logger.Info("rate limit set", "target", in.Target, "rate", l.Rate, "burst", l.Burst)
	writeJSON(w, http.StatusOK, Limit{Target: in.Target, Rate: l.Rate, Burst: l.Burst})
}

// targetFlow is the flow control part of a Target.
type targetFlow struct {
	// Limit is the rate limit in force (null: none); Tokens the tokens its
	// bucket holds now.
	Limit  *Limit `json:"limit"`
	Tokens *int   `json:"tokens,omitempty"`
	// HoldUntil is when the target's own wait (a Retry-After) ends.
	HoldUntil time.Time `json:"hold_until,omitzero"`
	// Ramp is the slow start after an outage (null: none).
	Ramp *Ramp `json:"ramp"`
}

// Ramp is a target's slow start after an outage: Window attempts may run
// at once, InFlight of them do.
type Ramp struct {
	Window   int `json:"window"`
	InFlight int `json:"in_flight"`
}

// flowView returns the flow control fields of t.
func flowView(t runlog.TargetStats) targetFlow {
	var f targetFlow
	if t.Limit != (runlog.Limit{}) {
		tokens := t.Tokens
		f.Limit, f.Tokens = &Limit{Rate: t.Limit.Rate, Burst: t.Limit.Burst}, &tokens
	}
	f.HoldUntil = t.HoldUntil
	if t.RampWindow > 0 {
		f.Ramp = &Ramp{Window: t.RampWindow, InFlight: t.RampInFlight}
	}
	return f
}

// SetLimit sets target's rate limit (rate 0 removes it).
func (c *Client) SetLimit(ctx context.Context, target string, rate float64, burst int) (Limit, error) {
	var out Limit
	body, err := json.Marshal(LimitRequest{Target: target, Rate: &rate, Burst: burst})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPut, "/v1/limits", body, &out)
	return out, err
}
