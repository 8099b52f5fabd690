package kinds_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// BenchmarkHTTPDelivery measures http jobs delivered to a no-op loopback
// target by a runner with a pool of 64, unsigned and signed with one key:
// b.N jobs are enqueued in batches, due in the future, and the clock runs
// from their due time until the target has seen every delivery. cpu-us/job
// is the process's CPU time (runner, store and target) over that span per
// job, steadier than jobs/s on a shared machine.
func BenchmarkHTTPDelivery(b *testing.B) {
	key, err := kinds.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("unsigned", func(b *testing.B) { benchDelivery(b, nil) })
	b.Run("signed", func(b *testing.B) { benchDelivery(b, staticSigner{key}) })
}

func benchDelivery(b *testing.B, signer kinds.Signer) {
	var seen atomic.Int64
	done := make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if seen.Add(1) == int64(b.N) {
			close(done)
		}
	}))
	defer target.Close()
	r, err := runlog.Open(b.TempDir(), runlog.Config{Concurrency: 64, Handlers: kinds.Handlers(kinds.Config{Signer: signer}), Logger: slog.New(slog.DiscardHandler)})
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
	cpu0 := kinds.ProcessCPU()
	b.ResetTimer()
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64((kinds.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/job")
}
