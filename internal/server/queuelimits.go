package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/runlog/runlog"
)

// putQueueLimit answers PUT /v1/limits for a queue: {"queue": NAME, "rate":
// R, "burst": B}, rate 0 removing the limit; the answer is the limit set.
func (a *API) putQueueLimit(w http.ResponseWriter, r *http.Request, in LimitRequest) {
	if in.Queue != runlog.DefaultQueue {
		if err := runlog.ValidQueueName(in.Queue); err != nil {
			a.fail(w, r, badRequest("%s", message(err)))
			return
		}
	}
	if in.Rate == nil {
		a.fail(w, r, badRequest(`rate is required: attempts per second, or 0 to remove the limit`))
		return
	}
	q, err := a.runner.SetQueueLimit(r.Context(), in.Queue, runlog.Limit{Rate: *in.Rate, Burst: in.Burst})
	if err != nil {
		a.answerQueue(w, r, q, err)
		return
	}
	a.cfg.Logger.Info("queue rate limit set", "queue", q.Name, "rate", q.Limit.Rate, "burst", q.Limit.Burst)
	writeJSON(w, http.StatusOK, Limit{Queue: q.Name, Rate: q.Limit.Rate, Burst: q.Limit.Burst})
}

// queueLimitOf returns the limit of a request's rate and burst, or nil when
// it gives no rate (the queue's limit is kept).
func queueLimitOf(rate *float64, burst int) *runlog.Limit {
	if rate == nil {
		return nil
	}
	return &runlog.Limit{Rate: *rate, Burst: burst}
}

// SetQueueLimit sets the rate limit of queue name (rate 0 removes it)
// through PUT /v1/limits.
func (c *Client) SetQueueLimit(ctx context.Context, name string, rate float64, burst int) (Limit, error) {
	var out Limit
	body, err := json.Marshal(LimitRequest{Queue: name, Rate: &rate, Burst: burst})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPut, "/v1/limits", body, &out)
	return out, err
}
