//go:build !linux

package storetest

import "time"

// ThreadCPU is measured on Linux only.
func ThreadCPU() time.Duration { return 0 }
