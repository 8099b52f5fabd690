package runlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/runlog/runlog/retry"
)

// Handler runs the attempts of one job kind. Build one with Handle, or
// HandleTyped (AddHandler) for a payload type that names its kind.
type Handler interface {
	// run decodes the payload and runs one attempt.
	run(ctx context.Context, payload []byte) error
	// timeout is the kind's attempt timeout, 0 for the runner's default.
	timeout() time.Duration
	// argsType is the Go type of the payloads it takes (nil: any).
	argsType() reflect.Type
	// boundKind is the kind its payload type names (HandleTyped), or "".
	boundKind() string
}

// HandlerOption configures a Handler.
type HandlerOption func(*handlerOptions)

type handlerOptions struct {
	timeout time.Duration
}

// HandlerTimeout sets the attempt timeout of the kind (a job's own Timeout
// still wins).
func HandlerTimeout(d time.Duration) HandlerOption {
	return func(o *handlerOptions) { o.timeout = d }
}

// typedHandler decodes the payload into T and calls fn.
type typedHandler[T any] struct {
	fn   func(ctx context.Context, payload T) error
	opts handlerOptions
	kind string // HandleTyped: T's kind
}

// Handle builds the handler of a job kind from a typed function. The
// payload is decoded from JSON into T; a payload of type []byte or
// json.RawMessage is passed as is. A payload that does not decode fails the
// job permanently (another attempt would fail the same way). Enqueue
// refuses a Go value of another type than T (or *T) for the kind; raw
// bytes are taken as they are. When T names its kind (JobArgs), prefer
// HandleTyped or AddHandler.
//
// fn signals the outcome of the attempt with its error: nil is a success, a
// plain error a retryable failure, and Permanent, RetryAfter and Unsafe mark
// the others. A panic is a retryable failure with the stack in the reason.
func Handle[T any](fn func(ctx context.Context, payload T) error, opts ...HandlerOption) Handler {
	h := &typedHandler[T]{fn: fn}
	for _, o := range opts {
		o(&h.opts)
	}
	return h
}

func (h *typedHandler[T]) timeout() time.Duration { return h.opts.timeout }

func (h *typedHandler[T]) argsType() reflect.Type { return payloadType[T]() }

func (h *typedHandler[T]) boundKind() string { return h.kind }

func (h *typedHandler[T]) run(ctx context.Context, payload []byte) error {
	var v T
	switch p := any(&v).(type) {
	case *[]byte:
		*p = payload
	case *json.RawMessage:
		*p = payload
	default:
		if err := json.Unmarshal(payload, &v); err != nil {
			return Permanent(fmt.Errorf("runlog: the payload does not decode into %T: %w", v, err))
		}
	}
	return h.fn(ctx, v)
}

// outcomeError carries the outcome class a handler chose.
type outcomeError struct {
	class retry.Class
	after time.Duration // Retry-After; < 0 for none
	err   error
	gone  bool // Gone: the target no longer exists (endpoint.go)
}

func (e *outcomeError) Error() string {
	if e.err == nil {
		return e.class.String() + " failure"
	}
	return e.err.Error()
}

func (e *outcomeError) Unwrap() error { return e.err }

// Permanent marks err as a permanent failure: another attempt would fail the
// same way, so the job fails now with err as the reason. It does not count
// against the target's breaker: the target answered.
func Permanent(err error) error {
	return &outcomeError{class: retry.Permanent, after: -1, err: err}
}

// RetryAfter marks err as a retryable failure after which the target asked
// to wait d (e.g. an HTTP Retry-After): the job is tried again after d, up
// to Config.MaxRetryAfter (not the policy's Cap), and no other job of the
// same target starts before then (the target holds; a job with no target
// holds nothing).
func RetryAfter(d time.Duration, err error) error {
	if d < 0 {
		d = 0
	}
	return &outcomeError{class: retry.Retryable, after: d, err: err}
}

// Unsafe marks err as a failure of work that must not run again (it may have
// had an effect): the job fails now, and the failure counts against the
// target's breaker.
func Unsafe(err error) error {
	return &outcomeError{class: retry.Unsafe, after: -1, err: err}
}

// classify maps a handler's error to an outcome class, the server's wait in
// ms (-1 for none) and the error text.
func classify(err error) (retry.Class, int64, string) {
	if err == nil {
		return retry.Success, -1, ""
	}
	var oe *outcomeError
	if errors.As(err, &oe) {
		after := int64(-1)
		if oe.after >= 0 {
			after = oe.after.Milliseconds()
		}
		return oe.class, after, err.Error()
	}
	return retry.Retryable, -1, err.Error()
}

// OutcomeOf returns the outcome that a handler's error gives its attempt,
// as Attempt.Outcome names it: "success" (nil), "retryable", "permanent"
// (Permanent) or "unsafe" (Unsafe). For middleware that reports outcomes.
func OutcomeOf(err error) string {
	class, _, _ := classify(err)
	return class.String()
}

// AttemptInfo identifies the attempt a handler runs, so that the work can
// deduplicate downstream (delivery is at least once).
type AttemptInfo struct {
	JobID   uint64
	Attempt int
	Kind    string
	Target  string
}

type attemptKey struct{}

// attemptCtx is what the runner stores in an attempt's context.
type attemptCtx struct {
	info     AttemptInfo
	metadata map[string]string // the job's (JobRequest.Metadata); nil for none
	h        Handler           // runs the attempt (callHandler, after the middleware)
	payload  []byte
	mu       sync.Mutex
	out      []byte // guarded by mu: the last maxOutput bytes recorded
}

// maxOutput bounds the output kept with one attempt.
const maxOutput = 4 << 10

// MetadataFrom returns the metadata of the job whose attempt ctx belongs to
// (JobRequest.Metadata): nil when the job has none or ctx is not (derived
// from) an attempt's context. It is the runner's copy: read it, do not
// change it. Middleware reads it from the context it gets.
func MetadataFrom(ctx context.Context) map[string]string {
	if a, ok := ctx.Value(attemptKey{}).(*attemptCtx); ok {
		return a.metadata
	}
	return nil
}

// AttemptFrom returns the attempt that ctx belongs to, if ctx is (derived
// from) the context the runner gave a handler.
func AttemptFrom(ctx context.Context) (AttemptInfo, bool) {
	a, ok := ctx.Value(attemptKey{}).(*attemptCtx)
	if !ok {
		return AttemptInfo{}, false
	}
	return a.info, true
}

// RecordOutput appends b to the output kept with the running attempt (the
// last 4 KiB are kept). It does nothing outside a handler.
func RecordOutput(ctx context.Context, b []byte) {
	a, ok := ctx.Value(attemptKey{}).(*attemptCtx)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.out = append(a.out, b...)
	if len(a.out) > maxOutput {
		a.out = append(a.out[:0:0], a.out[len(a.out)-maxOutput:]...)
	}
}

// output returns the recorded output.
func (a *attemptCtx) output() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out
}
