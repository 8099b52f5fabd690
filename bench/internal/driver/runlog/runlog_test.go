package runlog

import (
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
	"github.com/runlog/runlog/bench/internal/harness/harnesstest"
)

func TestConformance(t *testing.T) {
	harnesstest.ConformanceModes(t, Open, harness.Config{Concurrency: 8})
}
