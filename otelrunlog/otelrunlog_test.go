package otelrunlog_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/otelrunlog"
)

// tracedRunner opens a runner on a temporary journal whose kind "work"
// fails its first attempt and succeeds after, traced into an in-memory
// exporter; seen receives each attempt's TraceParent.
func tracedRunner(t *testing.T) (*runlog.Runner, *tracetest.InMemoryExporter, *sdktrace.TracerProvider, chan string) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := otelrunlog.New(tp, nil)
	seen := make(chan string, 8)
	var calls atomic.Int32
	r, err := runlog.Open(t.TempDir(), runlog.Config{
		Retry:             runlog.RetryPolicy{Attempts: 3, Base: time.Millisecond, Cap: time.Millisecond},
		EnqueueMiddleware: []runlog.EnqueueMiddleware{tr.Enqueue()},
		Middleware:        []runlog.Middleware{tr.Attempt()},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, _ []byte) error {
				seen <- otelrunlog.TraceParent(ctx)
				if calls.Add(1) == 1 {
					return errors.New("first attempt fails")
				}
				return nil
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r, exp, tp, seen
}

// TestSpansFromRequestToAttempts checks the trace of one job enqueued under
// a request's span: the enqueue span is the request's child, each attempt's
// span is the enqueue's child in the same trace, with the job's attributes;
// the failed attempt is an error, the successful one is not; the handler
// sees its attempt's span; the metadata holds the trace context.
func TestSpansFromRequestToAttempts(t *testing.T) {
	t.Parallel()
	r, exp, tp, seen := tracedRunner(t)
	ctx, request := tp.Tracer("app").Start(context.Background(), "POST /signup")
	id, err := r.Enqueue(ctx, "work", map[string]string{"to": "ada"}, runlog.WithMetadata(map[string]string{"tenant": "acme"}))
	request.End()
	if err != nil {
		t.Fatal(err)
	}
	if j, err := r.Wait(context.Background(), id); err != nil || j.State != runlog.StateSucceeded {
		t.Fatalf("Wait = %+v, %v", j, err)
	}
	j, err := r.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Metadata["tenant"] != "acme" || j.Metadata["traceparent"] == "" {
		t.Fatalf("the job's metadata is %v: want the caller's entry and a traceparent", j.Metadata)
	}

	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
	}
	if len(byName["runlog.enqueue"]) != 1 || len(byName["runlog.attempt work"]) != 2 {
		t.Fatalf("spans: %d enqueue, %d attempts; want 1 and 2 (all: %d)", len(byName["runlog.enqueue"]), len(byName["runlog.attempt work"]), len(spans))
	}
	enq := byName["runlog.enqueue"][0]
	if enq.Parent.SpanID() != request.SpanContext().SpanID() || enq.SpanKind != trace.SpanKindProducer {
		t.Fatalf("the enqueue span's parent is %v (kind %v), want the request's span %v", enq.Parent.SpanID(), enq.SpanKind, request.SpanContext().SpanID())
	}
	for i, a := range byName["runlog.attempt work"] {
		if a.SpanContext.TraceID() != request.SpanContext().TraceID() || a.Parent.SpanID() != enq.SpanContext.SpanID() || a.SpanKind != trace.SpanKindConsumer {
			t.Fatalf("attempt span %d: trace %v parent %v kind %v; want trace %v, parent the enqueue span %v, consumer",
				i, a.SpanContext.TraceID(), a.Parent.SpanID(), a.SpanKind, request.SpanContext().TraceID(), enq.SpanContext.SpanID())
		}
		attrs := map[string]any{}
		for _, kv := range a.Attributes {
			attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		wantOutcome, wantStatus := "retryable", codes.Error
		if i == 1 {
			wantOutcome, wantStatus = "success", codes.Unset
		}
		if attrs["runlog.job.id"] != int64(id) || attrs["runlog.job.attempt"] != int64(i+1) || attrs["runlog.job.kind"] != "work" ||
			attrs["runlog.attempt.outcome"] != wantOutcome || a.Status.Code != wantStatus {
			t.Fatalf("attempt span %d: attributes %v, status %v; want job %d, attempt %d, outcome %s, status %v", i, attrs, a.Status, id, i+1, wantOutcome, wantStatus)
		}
		tp := <-seen
		if want := "00-" + a.SpanContext.TraceID().String() + "-" + a.SpanContext.SpanID().String() + "-01"; tp != want {
			t.Fatalf("attempt %d: the handler's TraceParent is %q, want its attempt span's %q", i+1, tp, want)
		}
	}
}

// TestEnqueueWithoutSpanStartsTrace checks that an enqueue from a context
// with no span starts a trace of its own that the attempt joins, and that
// a refused enqueue ends its span as an error.
func TestEnqueueWithoutSpanStartsTrace(t *testing.T) {
	t.Parallel()
	r, exp, _, seen := tracedRunner(t)
	if _, err := r.Enqueue(context.Background(), "nobody-handles-this", nil); !errors.Is(err, runlog.ErrUnknownKind) {
		t.Fatalf("Enqueue of an unknown kind: %v", err)
	}
	id, err := r.Enqueue(context.Background(), "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	<-seen
	<-seen
	var refused, enq *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		if spans[i].Name != "runlog.enqueue" {
			continue
		}
		if spans[i].Status.Code == codes.Error {
			refused = &spans[i]
		} else {
			enq = &spans[i]
		}
	}
	if refused == nil || enq == nil || enq.Parent.IsValid() {
		t.Fatalf("want a refused enqueue span with an error status and a root enqueue span; got %+v", spans)
	}
	for _, s := range spans {
		if s.Name == "runlog.attempt work" && s.Parent.SpanID() != enq.SpanContext.SpanID() {
			t.Fatalf("an attempt span's parent is %v, want the enqueue span %v", s.Parent.SpanID(), enq.SpanContext.SpanID())
		}
	}
}

// TestTraceParentOutsideSpan checks TraceParent of a context with no span.
func TestTraceParentOutsideSpan(t *testing.T) {
	t.Parallel()
	if got := otelrunlog.TraceParent(context.Background()); got != "" {
		t.Fatalf("TraceParent without a span = %q, want empty", got)
	}
}
