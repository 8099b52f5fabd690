// Package runlogtest helps test code that uses runlog, from an ordinary
// go test:
//
//   - Run runs a handler once, as the runner runs an attempt (the payload
//     encoded and decoded as a job's, AttemptFrom and RecordOutput
//     working, a panic caught), and says how the attempt ended.
//     Context makes a handler's context for calling the function itself.
//   - NewRunner opens a real runlog.Runner on a temporary journal with a
//     fake Clock; Drain runs every job that is due until none is, and
//     Advance moves the clock and drains, so a test steps through retries
//     and schedules without waiting.
//   - Runner.RequireEnqueued and RequireNotEnqueued check that the code
//     under test enqueued (or did not enqueue) a job of a kind, with a
//     payload and options.
//
// A handler's unit test:
//
//	func TestSendWelcome(t *testing.T) {
//		res := runlogtest.Run(t.Context(), runlog.HandleTyped(sendWelcome), Welcome{To: "ada@example.com"},
//			runlog.AttemptInfo{JobID: 7, Attempt: 2})
//		if res.Outcome != "success" {
//			t.Fatalf("attempt: %s: %v", res.Outcome, res.Err)
//		}
//	}
package runlogtest

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/bridge"
)

// Result is how one attempt run by Run ended.
type Result struct {
	// Err is the handler's error (nil on success).
	Err error
	// Outcome is what the runner would make of Err: "success",
	// "retryable", "permanent" or "unsafe".
	Outcome string
	// RetryAfter is the wait a RetryAfter error asked for; < 0 when the
	// error asked for none.
	RetryAfter time.Duration
	// Output is what the handler recorded with runlog.RecordOutput (the
	// last 4 KiB, as a job keeps it).
	Output string
}

// Run runs h once on payload, as the runner runs attempt a of a job: the
// payload is encoded as Enqueue encodes it (JSON, or raw bytes as they
// are) and decoded into the handler's type, the context is an attempt
// context (see Context), and a panic becomes a retryable failure with the
// stack. Zero fields of a get defaults: JobID 1, Attempt 1, Kind the
// handler's (HandleTyped) or "test", Target the kind. A payload that does
// not encode is a permanent failure, as Enqueue would have refused it.
// Config.Middleware is not applied: Run tests the handler itself.
func Run(ctx context.Context, h runlog.Handler, payload any, a runlog.AttemptInfo) Result {
	if a.Kind == "" {
		a.Kind = bridge.HandlerKind(h)
	}
	a = withDefaults(a)
	raw, err := encode(payload)
	if err != nil {
		return result(runlog.Permanent(err), nil)
	}
	actx := Context(ctx, a)
	err = bridge.RunHandler(actx, h, raw)
	return result(err, actx)
}

// result describes an attempt's error and the output recorded in actx.
func result(err error, actx context.Context) Result {
	out, after := bridge.Outcome(err)
	res := Result{Err: err, Outcome: out, RetryAfter: after}
	if actx != nil {
		res.Output = string(bridge.Output(actx))
	}
	return res
}

// Context returns a child of ctx that is the context of attempt a (zero
// fields defaulted as by Run): runlog.AttemptFrom returns a,
// runlog.MetadataFrom the metadata given to ctx with WithMetadata, and
// runlog.RecordOutput records into it (read it with Output). Use it to call
// a handler's function directly.
func Context(ctx context.Context, a runlog.AttemptInfo) context.Context {
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	return bridge.AttemptContext(ctx, withDefaults(a), md)
}

type metadataKey struct{}

// WithMetadata returns a child of ctx with which Run and Context make the
// attempt of a job whose metadata is md (JobRequest.Metadata), as
// runlog.MetadataFrom reads it in the handler.
func WithMetadata(ctx context.Context, md map[string]string) context.Context {
	return context.WithValue(ctx, metadataKey{}, maps.Clone(md))
}

// Output returns what was recorded with runlog.RecordOutput in ctx, a
// context from Context (or one derived from it); "" for another.
func Output(ctx context.Context) string { return string(bridge.Output(ctx)) }

// withDefaults fills the zero fields of a.
func withDefaults(a runlog.AttemptInfo) runlog.AttemptInfo {
	if a.JobID == 0 {
		a.JobID = 1
	}
	if a.Attempt == 0 {
		a.Attempt = 1
	}
	if a.Kind == "" {
		a.Kind = "test"
	}
	if a.Target == "" {
		a.Target = a.Kind
	}
	return a
}

// encode is a payload as Enqueue stores it.
func encode(payload any) ([]byte, error) {
	switch p := payload.(type) {
	case []byte:
		return p, nil
	case json.RawMessage:
		return p, nil
	}
	return json.Marshal(payload)
}
