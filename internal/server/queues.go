package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/runlog/runlog"
)

// Queue is one queue in GET /v1/queues and the answer of the queue
// endpoints.
type Queue struct {
	Name string `json:"name"`
	// Concurrency bounds the queue's attempts in flight; 0 for no bound
	// but the pool.
	Concurrency int  `json:"concurrency"`
	Paused      bool `json:"paused"`
	// Rate (attempts per second) and Burst are the queue's rate limit, 0
	// and 0 for none; Tokens, with a limit only, what its bucket holds now.
	Rate   float64 `json:"rate"`
	Burst  int     `json:"burst"`
	Tokens *int    `json:"tokens,omitempty"`
	// Counts are the queue's jobs by state (pending and running).
	Counts QueueCounts `json:"counts"`
}

// QueueCounts are a queue's jobs by state.
type QueueCounts struct {
	Pending int `json:"pending"`
	Running int `json:"running"`
}

// QueueList is the answer of GET /v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// QueueRequest is the body of PUT /v1/queues/{name}.
type QueueRequest struct {
	// Concurrency is the queue's new concurrency (0 for no bound but the
	// pool); left out, it is kept. At least one of Concurrency and Rate is
	// given.
	Concurrency *int `json:"concurrency"`
	// Rate and Burst are the queue's new rate limit, as in PUT /v1/limits
	// (rate 0 removes it); left out, it is kept.
	Rate  *float64 `json:"rate"`
	Burst int      `json:"burst,omitempty"`
}

// maxQueueConcurrency bounds the concurrency a request may set.
const maxQueueConcurrency = 1_000_000

func queueView(q runlog.QueueStats) Queue {
	v := Queue{Name: q.Name, Concurrency: q.Concurrency, Paused: q.Paused, Counts: QueueCounts{Pending: q.Pending, Running: q.Running}}
	if q.Limit != (runlog.Limit{}) {
		tokens := q.Tokens
		v.Rate, v.Burst, v.Tokens = q.Limit.Rate, q.Limit.Burst, &tokens
	}
	return v
}

func queuesView(qs []runlog.QueueStats) QueueList {
	v := QueueList{Queues: make([]Queue, 0, len(qs))}
	for _, q := range qs {
		v.Queues = append(v.Queues, queueView(q))
	}
	return v
}

func (a *API) queues(w http.ResponseWriter, r *http.Request) {
	qs, err := a.runner.Queues(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queuesView(qs))
}

// queueName reads and checks the {name} path value.
func (a *API) queueName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if name == runlog.DefaultQueue {
		return name, true
	}
	if err := runlog.ValidQueueName(name); err != nil {
		a.fail(w, r, badRequest("%s", message(err)))
		return "", false
	}
	return name, true
}

func (a *API) putQueue(w http.ResponseWriter, r *http.Request) {
	name, ok := a.queueName(w, r)
	if !ok {
		return
	}
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var req QueueRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || !onlySpace(body[dec.InputOffset():]) {
		a.fail(w, r, badRequest(`the body must be one JSON object {"concurrency": N, "rate": R, "burst": B} with N an integer from 0 to %d (each field optional, at least one given)`, maxQueueConcurrency))
		return
	}
	if req.Concurrency == nil && req.Rate == nil {
		a.fail(w, r, badRequest(`concurrency is required (or rate): send {"concurrency": N} (0 for no bound but the pool) and/or {"rate": R, "burst": B} (rate 0 removes the limit)`))
		return
	}
	if req.Concurrency != nil {
		if n := *req.Concurrency; n < 0 || n > maxQueueConcurrency {
			a.fail(w, r, badRequest("concurrency %d must be from 0 (no bound but the pool) to %d", n, maxQueueConcurrency))
			return
		}
	}
	q, err := a.runner.SetQueueSetting(r.Context(), name, req.Concurrency, nil, queueLimitOf(req.Rate, req.Burst))
	a.answerQueue(w, r, q, err)
}

func (a *API) pauseQueue(w http.ResponseWriter, r *http.Request) {
	if name, ok := a.queueName(w, r); ok {
		q, err := a.runner.PauseQueue(r.Context(), name)
		a.answerQueue(w, r, q, err)
	}
}

func (a *API) resumeQueue(w http.ResponseWriter, r *http.Request) {
	if name, ok := a.queueName(w, r); ok {
		q, err := a.runner.ResumeQueue(r.Context(), name)
		a.answerQueue(w, r, q, err)
	}
}

func (a *API) answerQueue(w http.ResponseWriter, r *http.Request, q runlog.QueueStats, err error) {
	if err != nil {
		if errors.Is(err, runlog.ErrInvalid) {
			err = badRequest("%s", message(err))
		}
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queueView(q))
}
