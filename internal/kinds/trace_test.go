package kinds_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/otelrunlog"
)

// traceHeaders is a target that records each delivery's traceparent and
// tracestate headers.
func traceHeaders(t *testing.T) (url string, got chan [2]string) {
	got = make(chan [2]string, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- [2]string{r.Header.Get("traceparent"), r.Header.Get("tracestate")}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

// TestHTTPKindSendsJobTraceContext checks what trace context a delivery
// sends when tracing is off: the job's well-formed traceparent metadata
// (with tracestate), nothing for a malformed one, and the job's own
// traceparent header over its metadata.
func TestHTTPKindSendsJobTraceContext(t *testing.T) {
	t.Parallel()
	url, got := traceHeaders(t)
	r := openRunner(t, kinds.Config{})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name    string
		md      map[string]string
		headers map[string]string
		want    [2]string
	}{
		{"metadata", map[string]string{"traceparent": parent, "tracestate": "vendor=1"}, nil, [2]string{parent, "vendor=1"}},
		{"no metadata", nil, nil, [2]string{}},
		{"malformed traceparent", map[string]string{"traceparent": "00-XYZ"}, nil, [2]string{}},
		{"all-zero trace id", map[string]string{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil, [2]string{}},
		{"tracestate not printable", map[string]string{"traceparent": parent, "tracestate": "a=\u00e9"}, nil, [2]string{parent, ""}},
		{"the job's own header wins", map[string]string{"traceparent": parent}, map[string]string{"traceparent": "mine"}, [2]string{"mine", ""}},
	}
	for _, tt := range tests {
		id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: url, Headers: tt.headers}, runlog.WithMetadata(tt.md))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if j := waitJob(t, r, id, finished); j.State != runlog.StateSucceeded {
			t.Fatalf("%s: job %s: %s", tt.name, j.State, j.LastError)
		}
		if h := <-got; h != tt.want {
			t.Errorf("%s: the target saw traceparent %q tracestate %q, want %q %q", tt.name, h[0], h[1], tt.want[0], tt.want[1])
		}
	}
}

// TestHTTPKindSendsAttemptSpan checks that with tracing on, a delivery
// sends its attempt span's context: the trace of the enqueue, the span of
// the attempt.
func TestHTTPKindSendsAttemptSpan(t *testing.T) {
	t.Parallel()
	url, got := traceHeaders(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tr := otelrunlog.New(tp, nil)
	r, err := runlog.Open(t.TempDir(), runlog.Config{
		Handlers:          kinds.Handlers(kinds.Config{}),
		EnqueueMiddleware: []runlog.EnqueueMiddleware{tr.Enqueue()},
		Middleware:        []runlog.Middleware{tr.Attempt()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	if j := waitJob(t, r, id, finished); j.State != runlog.StateSucceeded {
		t.Fatalf("job %s: %s", j.State, j.LastError)
	}
	h := <-got
	var attempt *tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		if spans[i].Name == "runlog.attempt "+kinds.KindHTTP {
			attempt = &spans[i]
		}
	}
	if attempt == nil {
		t.Fatalf("no attempt span among %d spans", len(spans))
	}
	want := "00-" + attempt.SpanContext.TraceID().String() + "-" + attempt.SpanContext.SpanID().String() + "-01"
	if h[0] != want {
		t.Fatalf("the target saw traceparent %q, want the attempt span's %q", h[0], want)
	}
}
