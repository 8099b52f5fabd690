package kinds_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// BenchmarkHTTPDelivery measures http jobs delivered to a no-op loopback
// target by a runner with a pool of 64: b.N jobs are enqueued in batches,
// due in the future, and the clock runs from their due time until the
// target has seen every delivery.
func BenchmarkHTTPDelivery(b *testing.B) {
	var seen atomic.Int64
	done := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if seen.Add(1) == int64(b.N) {
			close(done)
		}
	}))
	defer target.Close()
	r, err := runlog.Open(b.TempDir(), runlog.Config{Concurrency: 64, Handlers: kinds.Handlers(kinds.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	due := time.Now().Add(time.Second + time.Duration(b.N)*20*time.Microsecond)
	payload := []byte(`{"url":"` + target.URL + `/noop","body":"{}"}`)
	tgt, _ := kinds.HTTPTarget(target.URL)
	for i := 0; i < b.N; i += 1000 {
		reqs := make([]runlog.JobRequest, min(1000, b.N-i))
		for j := range reqs {
			reqs[j] = runlog.JobRequest{Kind: kinds.KindHTTP, Payload: payload, RunAt: due, Target: tgt}
		}
		if _, err := r.EnqueueMany(context.Background(), reqs); err != nil {
			b.Fatal(err)
		}
	}
	if time.Now().After(due) {
		b.Fatal("enqueueing took longer than planned; the measurement would include it")
	}
	time.Sleep(time.Until(due)) // the jobs become due at due: the measurement starts then
	b.ResetTimer()
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
