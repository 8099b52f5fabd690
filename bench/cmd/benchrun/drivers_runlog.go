//go:build !norunlog

package main

// The runlog driver; build with -tags norunlog while the engine does not
// compile, and the report says that runlog's column is missing.
import _ "github.com/runlog/runlog/bench/internal/driver/runlog"
