package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

func BenchmarkDecodeJobRequest(b *testing.B) {
	body := []byte(`{"kind":"http","url":"http://127.0.0.1:9000/hook","headers":{"Content-Type":"application/json"},"body":"{\"order\":42}","key":"order-42","retry":{"attempts":3}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeJobRequest(body, testPolicy); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAPIEnqueue measures POST /v1/jobs over loopback HTTP from 64
// concurrent clients against a real runner: each answer comes after the job
// is durable. The jobs are due in an hour so that only enqueueing is
// measured.
func BenchmarkAPIEnqueue(b *testing.B) {
	r, err := runlog.Open(b.TempDir(), runlog.Config{Handlers: kinds.Handlers(kinds.Config{})})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(context.Background())
	srv := httptest.NewServer(NewAPI(r, APIConfig{}))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	body := []byte(`{"kind":"http","url":"http://127.0.0.1:9/hook","body":"{}","run_at":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `"}`)
	var failed atomic.Int64
	b.SetParallelism((64 + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := hc.Post(srv.URL+"/v1/jobs", "application/json", bytes.NewReader(body))
			if err != nil {
				failed.Add(1)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				failed.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d enqueues failed", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
