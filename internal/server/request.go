package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/jsonscan"
	"github.com/runlog/runlog/internal/kinds"
)

// Bounds on the common fields of a job request.
const (
	maxKeyLen       = 512
	maxTargetLen    = 512
	maxRetryAttempt = 1000
	maxTimeout      = 24 * time.Hour
)

// ErrBadRequest is wrapped by every error that DecodeJobRequest returns for a
// request the client must fix; the API answers it with 400.
var ErrBadRequest = errors.New("server: bad request")

// JobRequest is the JSON body of POST /v1/jobs. Kind is "http" (URL
// required; Method, Headers, Body optional) or "exec" (Command required; Args,
// Stdin optional); the other fields are common to both kinds and optional.
type JobRequest struct {
	Kind string `json:"kind"`

	URL     string            `json:"url,omitempty"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`

	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Stdin   string   `json:"stdin,omitempty"`

	// Payload is the payload of a job of an application's kind (neither
	// http nor exec), taken when the policy allows those kinds
	// (Policy.AppKinds: an API mounted over an application's runner).
	Payload json.RawMessage `json:"payload,omitempty"`

	// Key is an idempotency key: a second request with the same key returns
	// the first job instead of adding one.
	Key string `json:"key,omitempty"`
	// RunAt is the due time as RFC 3339; empty means now.
	RunAt string `json:"run_at,omitempty"`
	// Target overrides the breaker key (by default scheme://host:port of
	// the URL for http, "exec:NAME" for exec).
	Target string `json:"target,omitempty"`
	// Timeout is the attempt timeout as a Go duration ("30s").
	Timeout string `json:"timeout,omitempty"`
	// Retry overrides parts of the server's default retry policy.
	Retry *RetryRequest `json:"retry,omitempty"`
	// Metadata is the job's string metadata (runlog.JobRequest.Metadata):
	// kept with the job and shown by GET /v1/jobs/{id}; a "traceparent"
	// entry is sent on with an http delivery.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Queue names the job's queue; empty means "default".
	Queue string `json:"queue,omitempty"`
	// Priority orders the due jobs: higher starts first; 0 by default.
	Priority int `json:"priority,omitempty"`
}

// RetryRequest is a job's retry policy in a request: the fields left out keep
// the server's defaults. Durations are Go duration strings.
type RetryRequest struct {
	Attempts int    `json:"attempts,omitempty"`
	Base     string `json:"base,omitempty"`
	Cap      string `json:"cap,omitempty"`
	Deadline string `json:"deadline,omitempty"`
}

// Policy is what the server allows in job requests.
type Policy struct {
	// AllowHosts, when not empty, limits the hosts http jobs may target
	// (see kinds.HostAllowed).
	AllowHosts []string
	// Guard, when not nil, refuses at enqueue an http job whose URL is a
	// literal address it would refuse at delivery (see
	// kinds.Guard.CheckTarget).
	Guard *kinds.Guard
	// Commands are the exec commands the operator registered (name → path).
	Commands map[string]string
	// Retry is the default retry policy; a request's retry object overrides
	// the fields it gives.
	Retry runlog.RetryPolicy
	// AppKinds takes jobs of kinds other than http and exec, with their
	// payload as the JSON of the request's payload field (the runner
	// refuses a kind it has no handler for). runlog serve has no such
	// kinds; an API mounted over an application's runner has.
	AppKinds bool
	// HTTPRetry, when not zero, is the default retry policy of http jobs
	// instead of Retry: a job without a retry object gets it, and a job's
	// retry object overrides its fields.
	HTTPRetry runlog.RetryPolicy
}

// DecodeJobRequest decodes and validates the JSON body of POST /v1/jobs into
// the request the runner enqueues. The job's payload is the JSON of the
// kind's part of the request (kinds.HTTPRequest or kinds.ExecRequest). Every
// error wraps ErrBadRequest and says which field to fix.
func DecodeJobRequest(data []byte, p Policy) (runlog.JobRequest, error) {
	var req JobRequest
	if decodeFast(data, &req) {
		return req.Resolve(p)
	}
	req = JobRequest{}
	if err := decodeStd(data, &req); err != nil {
		return runlog.JobRequest{}, err
	}
	return req.Resolve(p)
}

// decodeStd decodes a job request with encoding/json: unknown fields, data
// after the object and strings encoding/json would alter (checkText) are
// refused.
func decodeStd(data []byte, req *JobRequest) error {
	if err := checkText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return badRequest("the body is not a valid job request: %v", err)
	}
	if !onlySpace(data[dec.InputOffset():]) {
		return badRequest("the body has data after the job object; send one JSON object")
	}
	return nil
}

// onlySpace reports whether b holds only JSON white space. (Decoder.More
// is not the test: it reports false before a stray '}' or ']'.)
func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// checkText refuses a body that encoding/json would not decode byte for
// byte: invalid UTF-8 (outside strings it is a syntax error anyway) and a
// \u escape of a lone UTF-16 surrogate. encoding/json replaces both with
// U+FFFD, so two idempotency keys that differ would decode equal and the
// second job would be taken for the first.
func checkText(data []byte) error {
	if !utf8.Valid(data) {
		return badRequest("the body is not valid UTF-8; JSON strings must be UTF-8 text (encode binary values, e.g. in hex or base64)")
	}
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(data) && data[i+1] == 'u' {
				r, ok := jsonscan.Hex4(data[i+2:])
				switch {
				case !ok:
					// encoding/json reports the malformed escape.
				case r >= 0xDC00 && r <= 0xDFFF:
					return loneSurrogate(data[i : i+6])
				case r >= 0xD800 && r <= 0xDBFF:
					lo, ok := rune(0), i+7 < len(data) && data[i+6] == '\\' && data[i+7] == 'u'
					if ok {
						lo, ok = jsonscan.Hex4(data[i+8:])
					}
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return loneSurrogate(data[i : i+6])
					}
					i += 6 // the pair's low half
				}
				i += 4
			}
			i++ // the escaped character
		}
	}
	return nil
}

func loneSurrogate(esc []byte) error {
	return badRequest("the body has %s, a lone UTF-16 surrogate, in a string; JSON strings must be text (a surrogate escape only as half of a pair)", esc)
}

// MaxBatch is the most jobs one POST /v1/jobs/batch may carry.
const MaxBatch = 1000

// BatchRequest is the JSON body of POST /v1/jobs/batch.
type BatchRequest struct {
	Jobs []JobRequest `json:"jobs"`
}

// DecodeBatchRequest decodes and validates the body of POST /v1/jobs/batch:
// 1 to MaxBatch job requests, each as DecodeJobRequest checks it. Errors
// wrap ErrBadRequest and name the job's index.
func DecodeBatchRequest(data []byte, p Policy) ([]runlog.JobRequest, error) {
	var batch BatchRequest
	if !decodeBatchFast(data, &batch) {
		batch = BatchRequest{}
		if err := decodeBatchStd(data, &batch); err != nil {
			return nil, err
		}
	}
	if len(batch.Jobs) == 0 || len(batch.Jobs) > MaxBatch {
		return nil, badRequest("a batch has 1 to %d jobs, this one has %d", MaxBatch, len(batch.Jobs))
	}
	out := make([]runlog.JobRequest, len(batch.Jobs))
	for i := range batch.Jobs {
		req, err := batch.Jobs[i].Resolve(p)
		if err != nil {
			return nil, fmt.Errorf("jobs[%d]: %w", i, err)
		}
		out[i] = req
	}
	return out, nil
}

// decodeBatchStd decodes a batch with encoding/json, refusing what
// decodeStd refuses.
func decodeBatchStd(data []byte, batch *BatchRequest) error {
	if err := checkText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(batch); err != nil {
		return badRequest("the body is not a valid batch {\"jobs\": [...]}: %v", err)
	}
	if !onlySpace(data[dec.InputOffset():]) {
		return badRequest("the body has data after the batch object; send one JSON object")
	}
	return nil
}

// Resolve validates req under p and turns it into the request the runner
// enqueues. Errors wrap ErrBadRequest.
func (req *JobRequest) Resolve(p Policy) (runlog.JobRequest, error) {
	var (
		out runlog.JobRequest
		err error
	)
	out.Kind = req.Kind
	switch req.Kind {
	case kinds.KindHTTP:
		if req.Payload != nil {
			return out, badRequest("payload belongs to jobs of an application's kinds; an http job has url, method, headers and body")
		}
		if req.Command != "" || req.Args != nil || req.Stdin != "" {
			return out, badRequest("command, args and stdin belong to exec jobs, not http jobs")
		}
		hr := kinds.HTTPRequest{URL: req.URL, Method: req.Method, Headers: req.Headers, Body: req.Body}
		if out.Target, err = hr.Check(p.AllowHosts); err != nil {
			return out, invalid(err)
		}
		if p.Guard != nil {
			if err := p.Guard.CheckTarget(out.Target); err != nil {
				return out, badRequest("url %q: %v", hr.URL, err)
			}
		}
		out.Payload = hr.AppendJSON(make([]byte, 0, 64+len(hr.URL)+len(hr.Body)))
	case kinds.KindExec:
		if req.Payload != nil {
			return out, badRequest("payload belongs to jobs of an application's kinds; an exec job has command, args and stdin")
		}
		if req.URL != "" || req.Method != "" || req.Headers != nil || req.Body != "" {
			return out, badRequest("url, method, headers and body belong to http jobs, not exec jobs")
		}
		er := kinds.ExecRequest{Command: req.Command, Args: req.Args, Stdin: req.Stdin}
		if err := er.Validate(p.Commands); err != nil {
			return out, invalid(err)
		}
		out.Target = "exec:" + er.Command
		out.Payload, err = marshal(er)
	case "":
		return out, badRequest("kind is required: http or exec")
	default:
		if !p.AppKinds {
			if req.Payload != nil {
				return out, badRequest("unknown kind %q: runlog serve runs http and exec jobs; payload is for an API mounted over an application's runner", req.Kind)
			}
			return out, badRequest("unknown kind %q: use http or exec", req.Kind)
		}
		if req.URL != "" || req.Method != "" || req.Headers != nil || req.Body != "" || req.Command != "" || req.Args != nil || req.Stdin != "" {
			return out, badRequest("kind %q takes its payload in payload; url, method, headers, body, command, args and stdin belong to http and exec jobs", req.Kind)
		}
		out.Payload = req.Payload
	}
	if err != nil {
		return out, badRequest("encode payload: %v", err)
	}
	if err := req.resolveCommon(&out, p); err != nil {
		return out, err
	}
	return out, nil
}

// resolveCommon fills the fields shared by every kind.
func (req *JobRequest) resolveCommon(out *runlog.JobRequest, p Policy) error {
	if len(req.Key) > maxKeyLen {
		return badRequest("key is %d bytes, at most %d are allowed", len(req.Key), maxKeyLen)
	}
	out.Key = req.Key
	if req.Queue != "" && req.Queue != runlog.DefaultQueue {
		if err := runlog.ValidQueueName(req.Queue); err != nil {
			return badRequest("queue: %s", message(err))
		}
	}
	out.Queue = req.Queue
	if req.Priority < runlog.MinPriority || req.Priority > runlog.MaxPriority {
		return badRequest("priority %d must be an integer within %d to %d", req.Priority, runlog.MinPriority, runlog.MaxPriority)
	}
	out.Priority = req.Priority
	if req.Target != "" {
		if len(req.Target) > maxTargetLen {
			return badRequest("target is %d bytes, at most %d are allowed", len(req.Target), maxTargetLen)
		}
		out.Target = req.Target
	}
	if req.RunAt != "" {
		t, err := time.Parse(time.RFC3339Nano, req.RunAt)
		if err != nil {
			return badRequest("run_at %q is not an RFC 3339 time such as 2030-01-02T15:04:05Z", req.RunAt)
		}
		out.RunAt = t
	}
	if req.Timeout != "" {
		d, err := parseDuration("timeout", req.Timeout)
		if err != nil {
			return err
		}
		if d <= 0 || d > maxTimeout {
			return badRequest("timeout %q must be above 0 and at most %v", req.Timeout, maxTimeout)
		}
		out.Timeout = d
	}
	if len(req.Metadata) > 0 {
		// The runner checks the entries (ErrInvalid, a 400) when it
		// enqueues; copied, so that the request stays as it was decoded.
		out.Metadata = maps.Clone(req.Metadata)
	}
	def := p.Retry
	if req.Kind == kinds.KindHTTP && p.HTTPRetry != (runlog.RetryPolicy{}) {
		def = p.HTTPRetry
		if req.Retry == nil {
			out.Retry = &def
		}
	}
	if req.Retry != nil {
		pol, err := req.Retry.resolve(def)
		if err != nil {
			return err
		}
		out.Retry = &pol
	}
	return nil
}

// resolve applies r over the default policy def.
func (r *RetryRequest) resolve(def runlog.RetryPolicy) (runlog.RetryPolicy, error) {
	pol := def
	if r.Attempts < 0 || r.Attempts > maxRetryAttempt {
		return pol, badRequest("retry.attempts must be between 1 and %d", maxRetryAttempt)
	}
	if r.Attempts > 0 {
		pol.Attempts = r.Attempts
	}
	for _, f := range []struct {
		name, value string
		dst         *time.Duration
	}{
		{"retry.base", r.Base, &pol.Base},
		{"retry.cap", r.Cap, &pol.Cap},
		{"retry.deadline", r.Deadline, &pol.Deadline},
	} {
		if f.value == "" {
			continue
		}
		d, err := parseDuration(f.name, f.value)
		if err != nil {
			return pol, err
		}
		if d < 0 {
			return pol, badRequest("%s %q must not be negative", f.name, f.value)
		}
		*f.dst = d
	}
	if pol.Cap > 0 && pol.Base > pol.Cap {
		return pol, badRequest("retry.base (%v) is above retry.cap (%v)", pol.Base, pol.Cap)
	}
	return pol, nil
}

func parseDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badRequest("%s %q is not a duration such as 30s, 250ms or 2m", field, s)
	}
	return d, nil
}

// marshal encodes v as compact JSON without HTML escaping (payloads are not
// embedded in HTML, and escaping would only make them longer).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// invalid marks a validation error of a kind as the client's to fix.
func invalid(err error) error {
	return fmt.Errorf("%w: %w", ErrBadRequest, err)
}
