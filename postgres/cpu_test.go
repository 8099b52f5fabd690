package postgres_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuClock reads the CPU time the machine (every core, from /proc/stat:
// all but idle and iowait) and this process (getrusage) have spent, so that
// a benchmark can report CPU per job beside its rate: on a machine shared
// with other work, the rate moves with what else runs, the CPU a job costs
// much less. ok is false where /proc/stat cannot be read.
func cpuClock() (machine, process time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	process = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, process, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, process, false
	}
	var ticks int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, process, false
		}
		ticks += v
	}
	const userHZ = 100 // the kernel's USER_HZ, the unit of /proc/stat
	return time.Duration(ticks) * time.Second / userHZ, process, true
}
