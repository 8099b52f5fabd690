package otelrunlog_test

import (
	"context"
	"fmt"
	"os"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/otelrunlog"
)

// Tracing a runner: the enqueue under the caller's span, and the attempt
// that ran the job under the enqueue's, in one trace.
func Example() {
	exp := tracetest.NewInMemoryExporter() // in an application: an OTLP exporter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := otelrunlog.New(tp, nil)

	dir, _ := os.MkdirTemp("", "runlog-example-")
	defer os.RemoveAll(dir)
	r, err := runlog.Open(dir, runlog.Config{
		EnqueueMiddleware: []runlog.EnqueueMiddleware{tr.Enqueue()},
		Middleware:        []runlog.Middleware{tr.Attempt()},
		Handlers: map[string]runlog.Handler{
			"email": runlog.Handle(func(ctx context.Context, _ []byte) error { return nil }),
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close(context.Background())

	ctx, span := tp.Tracer("app").Start(context.Background(), "POST /signup")
	id, _ := r.Enqueue(ctx, "email", map[string]string{"to": "ada@example.com"})
	span.End()
	r.Wait(context.Background(), id)

	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	fmt.Println(names)
	// Output: [POST /signup runlog.attempt email runlog.enqueue]
}
