package main

// The peers' drivers register themselves with the harness.
import (
	_ "github.com/runlog/runlog/bench/internal/driver/asynq"
	_ "github.com/runlog/runlog/bench/internal/driver/goqite"
	_ "github.com/runlog/runlog/bench/internal/driver/river"
)
