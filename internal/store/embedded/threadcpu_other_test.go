//go:build !linux

package embedded

import "time"

// threadCPU is measured on Linux only.
func threadCPU() time.Duration { return 0 }
