package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100
// on every Linux architecture).
const clockTick = 10 * time.Millisecond

// processCPU returns the user and system CPU time that process pid (0: this
// one) has used, every thread, from /proc/PID/stat (Linux only).
func processCPU(pid int) (time.Duration, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, fmt.Errorf("CPU time of process %d: %w (it is read from /proc, on Linux only)", pid, err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU returns utime+stime of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses:
// the fields are counted after its last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("a /proc stat line without the command's ')': %.40q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("a /proc stat line with %d fields after the command, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("a /proc stat line with CPU time %q", s)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// cpuMeter measures the CPU time of this process and, when serverPID is
// not 0, of the server's over a span.
type cpuMeter struct {
	serverPID   int
	own, server time.Duration
}

// start reads both processes' CPU time.
func (m *cpuMeter) start() error {
	var err error
	m.own, m.server, err = m.read()
	return err
}

func (m *cpuMeter) read() (own, server time.Duration, err error) {
	if own, err = processCPU(0); err != nil {
		return 0, 0, err
	}
	if m.serverPID != 0 {
		server, err = processCPU(m.serverPID)
	}
	return own, server, err
}

// line returns what each process spent since start per job, n jobs, and
// the deliveries per second that implies on cores idle cores.
func (m *cpuMeter) line(n int64, cores int) (string, error) {
	own, server, err := m.read()
	if err != nil {
		return "", err
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	ownUS := per(own - m.own)
	if m.serverPID == 0 {
		return fmt.Sprintf("cpu: loadtest %.1f µs per job (receiver and enqueuer; --server-pid adds the server's)", ownUS), nil
	}
	serverUS := per(server - m.server)
	total := serverUS + ownUS
	return fmt.Sprintf("cpu: server %.1f µs + loadtest %.1f µs = %.1f µs per job (user+sys, every thread) = %.0f jobs/s on %d idle cores",
		serverUS, ownUS, total, float64(cores)*1e6/total, cores), nil
}
