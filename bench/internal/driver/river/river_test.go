package river

import (
	"os"
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
	"github.com/runlog/runlog/bench/internal/harness/harnesstest"
)

func TestConformanceSQLite(t *testing.T) {
	// Tuned only: River's default 100ms fetch cooldown makes W3 slow.
	harnesstest.Conformance(t, OpenSQLite, harness.Config{Mode: harness.ModeTuned, Concurrency: 8})
}

// TestConformancePostgres needs a PostgreSQL server: bench/run.sh starts
// one; set BENCH_PG_URL to its URL to run this test.
func TestConformancePostgres(t *testing.T) {
	url := os.Getenv("BENCH_PG_URL")
	if url == "" {
		t.Skip("BENCH_PG_URL is not set (a PostgreSQL URL; bench/run.sh starts a server)")
	}
	harnesstest.Conformance(t, OpenPostgres, harness.Config{Mode: harness.ModeTuned, Concurrency: 8, PostgresURL: url})
}
