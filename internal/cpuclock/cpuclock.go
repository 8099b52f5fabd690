// Package cpuclock reads the CPU time spent so far by the whole machine and
// by this process, so that a benchmark can report the CPU a job costs beside
// its rate: on a machine shared with other work the rate moves with that
// work, the CPU a job costs much less, and two builds compare more steadily
// by it.
package cpuclock

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mark is the CPU time spent up to an instant.
type Mark struct {
	// Machine is every core's busy time (/proc/stat: all but idle and
	// iowait), so a database server running here counts too.
	Machine time.Duration
	// Process is this process's user and system time (getrusage).
	Process time.Duration
}

// userHZ is the unit of /proc/stat's counters (the kernel's USER_HZ).
const userHZ = 100

// Read returns the CPU time spent so far; ok is false where /proc/stat or
// getrusage cannot be read (not Linux).
func Read() (m Mark, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Mark{}, false
	}
	m.Process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Mark{}, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return Mark{}, false
	}
	var ticks int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Mark{}, false
		}
		ticks += v
	}
	m.Machine = time.Duration(ticks) * time.Second / userHZ
	return m, true
}

// PerJob returns the CPU spent from m to end over jobs jobs, in
// microseconds a job: the machine's and the process's.
func (m Mark) PerJob(end Mark, jobs int) (machineUS, processUS float64) {
	if jobs <= 0 {
		return 0, 0
	}
	return float64((end.Machine - m.Machine).Microseconds()) / float64(jobs),
		float64((end.Process - m.Process).Microseconds()) / float64(jobs)
}
