package kinds

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// benchSigner signs every target with one key.
type benchSigner [][]byte

func (s benchSigner) Keys(string) [][]byte       { return s }
func (s benchSigner) MessageID(id uint64) string { return "msg_bench_" + strconv.FormatUint(id, 10) }

// BenchmarkDeliver measures the http kind's delivery path alone (no
// runner, no store): 64 goroutines deliver to a no-op loopback target,
// unsigned and signed with one key.
func BenchmarkDeliver(b *testing.B) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer target.Close()
	key, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		b.Fatal(err)
	}
	tgt, _ := HTTPTarget(target.URL)
	for _, bc := range []struct {
		name   string
		signer Signer
	}{{"unsigned", nil}, {"signed", benchSigner{key}}} {
		b.Run(bc.name, func(b *testing.B) {
			d := &deliverer{client: NewClient(64, &Guard{}), guard: &Guard{}, signer: bc.signer}
			var id atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(32) // 64 goroutines on 2 cores, as a pool of 64
			cpu0 := ProcessCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req := HTTPRequest{URL: target.URL + "/noop", Method: "POST", Body: "{}"}
					info := runlog.AttemptInfo{JobID: id.Add(1), Attempt: 1, Kind: KindHTTP, Target: tgt}
					if err := d.deliver(context.Background(), info, true, req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// ProcessCPU is the user and system time this process has used (for the
// benchmarks here and in kinds_test).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
