//go:build !unix

package dashboard

// cpuSeconds reports 0: process CPU time is only read on unix.
func cpuSeconds() float64 { return 0 }
