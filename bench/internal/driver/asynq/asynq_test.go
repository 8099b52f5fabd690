package asynq

import (
	"os"
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
	"github.com/runlog/runlog/bench/internal/harness/harnesstest"
)

// TestConformance needs a Redis server (it flushes it): set
// BENCH_REDIS_ADDR to its host:port to run this test.
func TestConformance(t *testing.T) {
	addr := os.Getenv("BENCH_REDIS_ADDR")
	if addr == "" {
		t.Skip("BENCH_REDIS_ADDR is not set (host:port of a Redis server the test may flush)")
	}
	harnesstest.Conformance(t, Open, harness.Config{Mode: harness.ModeTuned, Concurrency: 8, RedisAddr: addr})
}
