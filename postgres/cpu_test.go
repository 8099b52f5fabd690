package postgres_test

import (
	"time"

	"github.com/runlog/runlog/internal/cpuclock"
)

// cpuClock reads the CPU time the machine (PostgreSQL included) and this
// process have spent (cpuclock.Read); ok is false where it cannot.
func cpuClock() (machine, process time.Duration, ok bool) {
	m, ok := cpuclock.Read()
	return m.Machine, m.Process, ok
}
