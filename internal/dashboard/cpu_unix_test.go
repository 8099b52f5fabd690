//go:build unix

package dashboard

import "syscall"

// cpuSeconds returns the CPU time this process has used (user + system, GC
// workers included), or 0 if it cannot tell.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
