package storetest

import (
	"syscall"
	"time"
	"unsafe"
)

// ThreadCPU returns the CPU time the calling thread has used
// (CLOCK_THREAD_CPUTIME_ID): with the goroutine locked to its thread, the
// CPU a call costs, whatever else the machine runs meanwhile.
func ThreadCPU() time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
