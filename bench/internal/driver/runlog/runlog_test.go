package runlog

import (
	"os"

	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
	"github.com/runlog/runlog/bench/internal/harness/harnesstest"
)

func TestConformance(t *testing.T) {
	harnesstest.ConformanceModes(t, Open, harness.Config{Concurrency: 8})
}

// TestConformancePostgres needs a PostgreSQL server it may empty the
// runlog_bench schema of: bench/run.sh starts one; set BENCH_PG_URL to its
// URL to run this test.
func TestConformancePostgres(t *testing.T) {
	url := os.Getenv("BENCH_PG_URL")
	if url == "" {
		t.Skip("BENCH_PG_URL is not set (a PostgreSQL URL; bench/run.sh starts a server)")
	}
	harnesstest.ConformanceModes(t, OpenPostgres, harness.Config{Concurrency: 8, PostgresURL: url})
}
