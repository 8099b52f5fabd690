package harnesstest

import (
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
)

func TestMemoryConforms(t *testing.T) {
	Conformance(t, Memory(MemoryOptions{NoBatch: true}), harness.Config{Concurrency: 4})
	ConformanceModes(t, Memory(MemoryOptions{}), harness.Config{Concurrency: 4})
}
