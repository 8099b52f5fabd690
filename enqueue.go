package runlog

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// JobRequest is one job to enqueue.
type JobRequest struct {
	// Kind names the handler that runs the job (required unless Args is
	// set).
	Kind string
	// Payload is given to the handler (at most Config.MaxPayload bytes).
	Payload []byte
	// Args, when set instead of Kind and Payload, is a typed job's
	// payload: the kind is Args.Kind() and the payload its JSON. The
	// kind's handler must take Args' type (HandleTyped, AddHandler).
	Args JobArgs
	// RunAt is the due time; zero means now (or Delay from now).
	RunAt time.Time
	// Delay, when RunAt is zero, makes the job due Delay after now on the
	// runner's clock (RunIn sets it). At most one of RunAt and Delay may
	// be set.
	Delay time.Duration
	// Target names the downstream the job talks to: one circuit breaker per
	// target. Defaults to the kind.
	Target string
	// Key is an idempotency key: while a job with this key is held (not
	// finished, or finished and still retained), enqueueing the same key
	// again adds nothing and answers that job's id.
	Key string
	// Retry overrides Config.Retry for this job.
	Retry *RetryPolicy
	// Timeout overrides the attempt timeout for this job.
	Timeout time.Duration
	// Metadata is the job's string metadata: kept with the job, given to
	// its handler (runlog.MetadataFrom(ctx)) and shown by Job, the API and the
	// dashboard. At most MaxMetadataEntries entries; each key 1 to
	// MaxMetadataKey bytes of letters, digits and "._-", each value valid
	// UTF-8 of at most MaxMetadataValue bytes. Tracing (package otelrunlog)
	// keeps the trace context here, under "traceparent" and "tracestate".
	Metadata map[string]string

	// replayOf is the job a replay re-sends (Runner.Replay); 0 for none.
	replayOf uint64
	// Queue names the job's queue (ValidQueueName); "" or DefaultQueue is
	// the default queue. A queue can be paused and bounded
	// (Runner.PauseQueue, Runner.SetQueueConcurrency).
	Queue string
	// Priority orders the due jobs: a higher priority starts first, equal
	// priorities by due time, then id. Within MinPriority to MaxPriority;
	// 0 by default.
	Priority int
}

// The bounds of a job's metadata (JobRequest.Metadata).
const (
	MaxMetadataEntries = 16
	MaxMetadataKey     = 64
	MaxMetadataValue   = 1024
)

// EnqueueResult is the answer to one JobRequest.
type EnqueueResult struct {
	// ID is the job's id.
	ID uint64
	// Existing is set when the key was held by job ID: nothing was added.
	Existing bool
}

// EnqueueOption sets a field of the JobRequest that Enqueue builds.
type EnqueueOption func(*JobRequest)

// RunAt makes the job due at t.
func RunAt(t time.Time) EnqueueOption { return func(r *JobRequest) { r.RunAt = t } }

// RunIn makes the job due d from now, on the runner's clock (Config.Clock).
// See JobRequest.Delay.
func RunIn(d time.Duration) EnqueueOption {
	return func(r *JobRequest) { r.Delay = d }
}

// Target names the job's target (its breaker). See JobRequest.Target.
func Target(s string) EnqueueOption { return func(r *JobRequest) { r.Target = s } }

// Key sets the job's idempotency key. See JobRequest.Key.
func Key(s string) EnqueueOption { return func(r *JobRequest) { r.Key = s } }

// WithRetry overrides the retry policy of the job (Config.Retry) with p:
// how many attempts, the backoff between them and the overall deadline.
// See JobRequest.Retry. (Runner.Retry is something else: it retries a
// failed job by hand.)
func WithRetry(p RetryPolicy) EnqueueOption { return func(r *JobRequest) { r.Retry = &p } }

// Timeout overrides the attempt timeout of the job.
func Timeout(d time.Duration) EnqueueOption { return func(r *JobRequest) { r.Timeout = d } }

// WithMetadata adds the entries of m to the job's metadata (see
// JobRequest.Metadata); a later entry of the same key wins.
func WithMetadata(m map[string]string) EnqueueOption {
	return func(r *JobRequest) {
		if len(m) == 0 {
			return
		}
		md := make(map[string]string, len(r.Metadata)+len(m))
		maps.Copy(md, r.Metadata)
		maps.Copy(md, m)
		r.Metadata = md
	}
}

// Enqueue adds a job of the given kind and returns its id once the job is
// durable. The payload is encoded as JSON, unless it is a []byte or a
// json.RawMessage, which are stored as they are. A payload of another Go
// type than the kind's handler takes (see Handle) is refused with
// ErrInvalid; EnqueueArgs ties the type to the kind at compile time.
func (r *Runner) Enqueue(ctx context.Context, kind string, payload any, opts ...EnqueueOption) (uint64, error) {
	if err := checkPayloadType(r.cfg.Handlers[kind], kind, payload); err != nil {
		return 0, err
	}
	var raw []byte
	switch p := payload.(type) {
	case []byte:
		raw = p
	case json.RawMessage:
		raw = p
	default:
		b, err := json.Marshal(payload)
		if err != nil {
			return 0, fmt.Errorf("%w: payload of kind %q does not encode as JSON: %v", ErrInvalid, kind, err)
		}
		raw = b
	}
	req := JobRequest{Kind: kind, Payload: raw}
	for _, o := range opts {
		o(&req)
	}
	res, err := r.EnqueueJob(ctx, req)
	return res.ID, err
}

// EnqueueJob adds one job and answers once it is durable.
func (r *Runner) EnqueueJob(ctx context.Context, req JobRequest) (EnqueueResult, error) {
	res, err := r.EnqueueMany(ctx, []JobRequest{req})
	if err != nil {
		return EnqueueResult{}, err
	}
	return res[0], nil
}

// EnqueueMany adds many jobs with one durable write (one fdatasync for all)
// and answers, in order, once they are all durable. If any request is
// invalid, nothing is added. The requests are not changed.
func (r *Runner) EnqueueMany(ctx context.Context, reqs []JobRequest) ([]EnqueueResult, error) {
	if r.enqueue != nil {
		return r.enqueue(ctx, reqs)
	}
	return r.enqueueMany(ctx, reqs)
}

// enqueueMany is EnqueueMany after the enqueue middleware.
func (r *Runner) enqueueMany(ctx context.Context, reqs []JobRequest) ([]EnqueueResult, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := r.cfg.Clock.Now()
	jobs := make([]store.NewJob, len(reqs))
	for i := range reqs {
		req := reqs[i]
		j, err := r.newJob(&req, now)
		if err != nil {
			if len(reqs) > 1 {
				err = fmt.Errorf("request %d: %w", i, err)
			}
			return nil, err
		}
		jobs[i] = j
	}
	res, err := r.st.Enqueue(ctx, now.UnixMilli(), jobs)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]EnqueueResult, len(res))
	for i, e := range res {
		out[i] = EnqueueResult{ID: e.ID, Existing: e.Existing}
	}
	if obs := r.jobObserver(); obs != nil {
		r.reportEnqueued(obs, jobs, res)
	}
	if r.hub.wants(EventEnqueued) {
		at := r.cfg.Clock.Now()
		for i, e := range res {
			if !e.Existing {
				r.hub.emit(Event{Type: EventEnqueued, At: at, JobID: e.ID, Kind: jobs[i].Spec.Kind, Target: jobs[i].Spec.Target})
			}
		}
	}
	due := int64(math.MaxInt64)
	for _, j := range jobs {
		due = min(due, j.Due)
	}
	// Wake the dispatcher for a job due before the time it sleeps until,
	// and for one due now by the wall clock: after a forward step of the
	// clock, the dispatcher's timer may still be set for a time that the
	// wall clock has passed.
	if due < r.wakeAt.Load() || due <= r.nowMS() {
		r.signal()
	}
	return out, nil
}

// maxName bounds kinds, targets and keys.
const maxName = 1024

// newJob validates a request and builds the stored job (resolving Args
// into Kind and Payload in req).
func (r *Runner) newJob(req *JobRequest, now time.Time) (store.NewJob, error) {
	if req.Args != nil {
		if err := encodeArgs(req); err != nil {
			return store.NewJob{}, err
		}
	}
	if req.Kind == "" {
		return store.NewJob{}, fmt.Errorf("%w: a job needs a kind", ErrInvalid)
	}
	h, ok := r.cfg.Handlers[req.Kind]
	if !ok {
		return store.NewJob{}, fmt.Errorf("%w: %q; register its handler in Config.Handlers", ErrUnknownKind, req.Kind)
	}
	if req.Args != nil {
		if err := checkPayloadType(h, req.Kind, req.Args); err != nil {
			return store.NewJob{}, err
		}
	}
	if len(req.Payload) > r.cfg.MaxPayload {
		return store.NewJob{}, fmt.Errorf("%w: %d bytes, the limit is %d (Config.MaxPayload)", ErrTooLarge, len(req.Payload), r.cfg.MaxPayload)
	}
	if len(req.Kind) > maxName || len(req.Target) > maxName || len(req.Key) > maxName {
		return store.NewJob{}, fmt.Errorf("%w: kind, target and key are limited to %d bytes", ErrInvalid, maxName)
	}
	if !utf8.ValidString(req.Key) {
		// Stored keys pass through JSON, which turns invalid UTF-8 into
		// U+FFFD: two different keys would become one.
		return store.NewJob{}, fmt.Errorf("%w: key %q is not valid UTF-8; use a key of text (e.g. hex or base64 of the bytes)", ErrInvalid, req.Key)
	}
	policy := r.cfg.Retry
	if req.Retry != nil {
		policy = *req.Retry
	}
	p := policy.policy()
	if err := p.Validate(); err != nil {
		return store.NewJob{}, fmt.Errorf("%w: retry policy: %v", ErrInvalid, err)
	}
	if req.Timeout < 0 {
		return store.NewJob{}, fmt.Errorf("%w: timeout %v must be >= 0", ErrInvalid, req.Timeout)
	}
	target := req.Target
	if target == "" {
		target = req.Kind
	}
	queue, err := storedQueue(req.Queue)
	if err != nil {
		return store.NewJob{}, err
	}
	if err := validPriority(req.Priority); err != nil {
		return store.NewJob{}, err
	}
	if req.Delay < 0 {
		return store.NewJob{}, fmt.Errorf("%w: delay %v must be >= 0", ErrInvalid, req.Delay)
	}
	if req.Delay != 0 && !req.RunAt.IsZero() {
		return store.NewJob{}, fmt.Errorf("%w: a job has RunAt or Delay (RunIn), not both", ErrInvalid)
	}
	due := now.Add(req.Delay)
	if !req.RunAt.IsZero() {
		due = req.RunAt
	}
	md, err := metadata(req.Metadata)
	if err != nil {
		return store.NewJob{}, err
	}
	return store.NewJob{
		Due: due.UnixMilli(),
		Spec: state.Spec{
			Kind:      req.Kind,
			Target:    target,
			Payload:   req.Payload,
			Key:       req.Key,
			Policy:    p,
			TimeoutMS: req.Timeout.Milliseconds(),
			Metadata:  md,
			ReplayOf:  req.replayOf,
			Queue:     queue,
			Priority:  int32(req.Priority),
		},
	}, nil
}

// metadata checks a request's metadata and returns it as the state keeps
// it: sorted by key; nil when empty.
func metadata(m map[string]string) ([]state.Meta, error) {
	if len(m) == 0 {
		return nil, nil
	}
	if len(m) > MaxMetadataEntries {
		return nil, fmt.Errorf("%w: %d metadata entries, at most %d", ErrInvalid, len(m), MaxMetadataEntries)
	}
	out := make([]state.Meta, 0, len(m))
	for k, v := range m {
		if err := checkMetadataKey(k); err != nil {
			return nil, err
		}
		if len(v) > MaxMetadataValue || !utf8.ValidString(v) {
			return nil, fmt.Errorf("%w: metadata %q: the value must be valid UTF-8 of at most %d bytes", ErrInvalid, k, MaxMetadataValue)
		}
		out = append(out, state.Meta{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b state.Meta) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// checkMetadataKey refuses a metadata key that is empty, too long, or has a
// byte other than a letter, digit, '.', '_' or '-'.
func checkMetadataKey(k string) error {
	if k == "" || len(k) > MaxMetadataKey {
		return fmt.Errorf("%w: metadata key %q must be 1 to %d bytes", ErrInvalid, k, MaxMetadataKey)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: metadata key %q: use letters, digits, '.', '_' and '-' only", ErrInvalid, k)
		}
	}
	return nil
}

// metadataMap returns the state's metadata as a map; nil for none.
func metadataMap(md []state.Meta) map[string]string {
	if len(md) == 0 {
		return nil
	}
	m := make(map[string]string, len(md))
	for _, e := range md {
		m[e.Key] = e.Value
	}
	return m
}

// reportEnqueued tells obs of the jobs an enqueue added, by kind (one call
// per run of the same kind: a batch is usually of one).
func (r *Runner) reportEnqueued(obs JobObserver, jobs []store.NewJob, res []store.Enqueued) {
	kind, n := "", 0
	for i, e := range res {
		if e.Existing {
			continue
		}
		if k := jobs[i].Spec.Kind; k != kind {
			if n > 0 {
				obs.JobsEnqueued(kind, n)
			}
			kind, n = k, 0
		}
		n++
	}
	if n > 0 {
		obs.JobsEnqueued(kind, n)
	}
}
