// Package otelrunlog traces runlog jobs with OpenTelemetry: a span for
// every enqueue and for every attempt, joined through the trace context
// that the enqueue stores in the job's metadata, so that a trace runs from
// the request that enqueued a job to each attempt that ran it (and, for the
// server's http kind, into the delivery, which sends the attempt's
// traceparent on).
//
//	tr := otelrunlog.New(tracerProvider, nil)
//	r, err := runlog.Open(dir, runlog.Config{
//		Handlers:          handlers,
//		EnqueueMiddleware: []runlog.EnqueueMiddleware{tr.Enqueue()},
//		Middleware:        []runlog.Middleware{tr.Attempt()},
//	})
//
// Tracing is off unless this middleware is configured; with it, each
// enqueue is one span ("runlog.enqueue", kind producer, the ids it added as
// an attribute), and each attempt one span ("runlog.attempt KIND", kind
// consumer) whose parent is the enqueue's span, wherever and whenever the
// attempt runs. A job enqueued without a trace context in its context (no
// span in ctx) starts a new trace at the enqueue.
package otelrunlog

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/runlog/runlog"
)

// Tracing makes the enqueue and attempt middleware of one tracer.
type Tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/runlog/runlog/otelrunlog"

// The attributes the spans carry.
const (
	AttrJobID   = attribute.Key("runlog.job.id")
	AttrJobIDs  = attribute.Key("runlog.job.ids")
	AttrKind    = attribute.Key("runlog.job.kind")
	AttrTarget  = attribute.Key("runlog.job.target")
	AttrAttempt = attribute.Key("runlog.job.attempt")
	AttrOutcome = attribute.Key("runlog.attempt.outcome")
)

// New returns the tracing of tp, whose trace context travels in the job's
// metadata as prop writes it (nil: W3C Trace Context, the "traceparent"
// and "tracestate" entries). A nil tp is refused by a panic: tracing off is
// not configuring this middleware.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator) *Tracing {
	if tp == nil {
		panic("otelrunlog: New needs a TracerProvider")
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracing{tracer: tp.Tracer(ScopeName), prop: prop}
}

// Enqueue returns the enqueue middleware: one span per enqueue call, child
// of the span in the caller's context, whose context is stored in each
// request's metadata (entries a request already has under the
// propagator's keys are replaced). The span ends when the enqueue answers;
// a refused enqueue marks it as an error.
func (t *Tracing) Enqueue() runlog.EnqueueMiddleware {
	return func(next runlog.EnqueueFunc) runlog.EnqueueFunc {
		return func(ctx context.Context, reqs []runlog.JobRequest) ([]runlog.EnqueueResult, error) {
			ctx, span := t.tracer.Start(ctx, "runlog.enqueue", trace.WithSpanKind(trace.SpanKindProducer))
			defer span.End()
			carrier := propagation.MapCarrier{}
			t.prop.Inject(ctx, carrier)
			out := make([]runlog.JobRequest, len(reqs))
			for i, r := range reqs {
				if len(carrier) > 0 {
					md := make(map[string]string, len(r.Metadata)+len(carrier))
					maps.Copy(md, r.Metadata)
					maps.Copy(md, carrier)
					r.Metadata = md
				}
				out[i] = r
			}
			if len(reqs) == 1 {
				span.SetAttributes(AttrKind.String(kindOf(reqs[0])))
			}
			res, err := next(ctx, out)
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
				return res, err
			}
			ids := make([]int64, len(res))
			for i, e := range res {
				ids[i] = int64(e.ID)
			}
			span.SetAttributes(AttrJobIDs.Int64Slice(ids))
			return res, nil
		}
	}
}

// kindOf returns a request's kind, also when Args names it.
func kindOf(r runlog.JobRequest) string {
	if r.Kind == "" && r.Args != nil {
		return r.Args.Kind()
	}
	return r.Kind
}

// Attempt returns the attempt middleware: one span per attempt, whose
// parent is the trace context in the job's metadata (the enqueue's span),
// with the job's id, kind, target and attempt number, and the outcome.
// A failed attempt marks the span as an error.
func (t *Tracing) Attempt() runlog.Middleware {
	return func(next runlog.AttemptFunc) runlog.AttemptFunc {
		return func(ctx context.Context, a runlog.AttemptInfo) error {
			if md := runlog.MetadataFrom(ctx); len(md) > 0 {
				ctx = t.prop.Extract(ctx, propagation.MapCarrier(md))
			}
			ctx, span := t.tracer.Start(ctx, "runlog.attempt "+a.Kind, trace.WithSpanKind(trace.SpanKindConsumer),
				trace.WithAttributes(AttrJobID.Int64(int64(a.JobID)), AttrKind.String(a.Kind), AttrTarget.String(a.Target),
					AttrAttempt.Int(a.Attempt)))
			defer span.End()
			err := next(ctx, a)
			span.SetAttributes(AttrOutcome.String(runlog.OutcomeOf(err)))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// TraceParent returns the W3C traceparent header value of the span in ctx,
// or "" when ctx has no valid span: what a handler sends on to carry the
// trace into its own calls when it does not use an instrumented client.
func TraceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}
