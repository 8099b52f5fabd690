package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Client talks to a runlog server's API; the CLI, the demo and the load test
// use it. Its zero value is not usable: set BaseURL.
type Client struct {
	// BaseURL is the server's URL, e.g. "http://127.0.0.1:7070".
	BaseURL string
	// Token, when set, is sent as "Authorization: Bearer TOKEN".
	Token string
	// HTTP sends the requests. Defaults to http.DefaultClient.
	HTTP *http.Client
}

// APIError is an error answer of the API.
type APIError struct {
	Status  int    // HTTP status
	Message string // the body's "error"
}

// Error is the server's message and the status, e.g. "url is required
// (HTTP 400 Bad Request)".
func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d %s)", e.Message, e.Status, http.StatusText(e.Status))
}

// Enqueue posts a job request and returns the answer (Existing when its key
// was already held).
func (c *Client) Enqueue(ctx context.Context, req JobRequest) (Created, error) {
	var out Created
	body, err := marshal(req)
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/jobs", body, &out)
	return out, err
}

// EnqueueBatch posts up to MaxBatch job requests, stored with one durable
// write, all or none.
func (c *Client) EnqueueBatch(ctx context.Context, reqs []JobRequest) (CreatedBatch, error) {
	var out CreatedBatch
	body, err := marshal(BatchRequest{Jobs: reqs})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/jobs/batch", body, &out)
	return out, err
}

// Job returns one job with its history.
func (c *Client) Job(ctx context.Context, id uint64) (Job, error) {
	var out Job
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+strconv.FormatUint(id, 10), nil, &out)
	return out, err
}

// ListQuery holds the filters and paging of GET /v1/jobs; empty fields are
// left out.
type ListQuery struct {
	State, Kind, Target, Q, After, Order string
	Limit                                int
	Schedule                             string // the jobs this schedule made
}

// List returns one page of jobs.
func (c *Client) List(ctx context.Context, q ListQuery) (JobList, error) {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "kind": q.Kind, "target": q.Target, "q": q.Q, "after": q.After, "order": q.Order, "schedule": q.Schedule} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/v1/jobs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out JobList
	_, err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Cancel cancels a job and returns it.
func (c *Client) Cancel(ctx context.Context, id uint64, reason string) (Job, error) {
	var out Job
	body, err := marshal(map[string]string{"reason": reason})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/jobs/"+strconv.FormatUint(id, 10)+"/cancel", body, &out)
	return out, err
}

// Retry runs a failed job again and returns it.
func (c *Client) Retry(ctx context.Context, id uint64) (Job, error) {
	var out Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+strconv.FormatUint(id, 10)+"/retry", nil, &out)
	return out, err
}

// Replay re-sends the finished job id as a new job and returns it (its
// ReplayOf is id).
func (c *Client) Replay(ctx context.Context, id uint64) (Job, error) {
	var out Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+strconv.FormatUint(id, 10)+"/replay", nil, &out)
	return out, err
}

// ReplayMatching re-sends (or, with DryRun, counts) a target's jobs
// finished since a time.
func (c *Client) ReplayMatching(ctx context.Context, req ReplayRequest) (Replayed, error) {
	var out Replayed
	body, err := marshal(req)
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/replay", body, &out)
	return out, err
}

// Targets returns every target's breaker and counts.
func (c *Client) Targets(ctx context.Context) (TargetList, error) {
	var out TargetList
	_, err := c.do(ctx, http.MethodGet, "/v1/targets", nil, &out)
	return out, err
}

// PutSecret adds a signing secret to target (secret "" lets the server
// make one, returned in the answer).
func (c *Client) PutSecret(ctx context.Context, target, secret string) (SecretCreated, error) {
	var out SecretCreated
	body, err := json.Marshal(SecretRequest{Target: target, Secret: secret})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPut, "/v1/targets/secrets", body, &out)
	return out, err
}

// DeleteSecret retires the secret id of target.
func (c *Client) DeleteSecret(ctx context.Context, target, id string) (SecretsOfTarget, error) {
	var out SecretsOfTarget
	body, err := json.Marshal(SecretRequest{Target: target, SecretID: id})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodDelete, "/v1/targets/secrets", body, &out)
	return out, err
}

// Stats returns the job counts.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	_, err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &out)
	return out, err
}

// Health returns nil when GET /healthz answers 200.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil)
	return err
}

// do sends one request and decodes a 2xx JSON answer into out (when not
// nil); any other status becomes an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(c.BaseURL, "/")+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Queues returns every queue with its setting and counts.
func (c *Client) Queues(ctx context.Context) (QueueList, error) {
	var out QueueList
	_, err := c.do(ctx, http.MethodGet, "/v1/queues", nil, &out)
	return out, err
}

// SetQueueConcurrency sets the concurrency of queue name (0: no bound but
// the pool).
func (c *Client) SetQueueConcurrency(ctx context.Context, name string, n int) (Queue, error) {
	var out Queue
	body, err := json.Marshal(QueueRequest{Concurrency: &n})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPut, "/v1/queues/"+url.PathEscape(name), body, &out)
	return out, err
}

// PauseQueue pauses queue name.
func (c *Client) PauseQueue(ctx context.Context, name string) (Queue, error) {
	var out Queue
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(name)+"/pause", nil, &out)
	return out, err
}

// ResumeQueue resumes queue name.
func (c *Client) ResumeQueue(ctx context.Context, name string) (Queue, error) {
	var out Queue
	_, err := c.do(ctx, http.MethodPost, "/v1/queues/"+url.PathEscape(name)+"/resume", nil, &out)
	return out, err
}
