package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// ErrNoBatch is returned by Driver.EnqueueBatch when the system has no way
// to enqueue many jobs in one call; the report then shows "n/a".
var ErrNoBatch = errors.New("harness: the system has no batch enqueue")

// Mode says how a peer's polling is configured.
type Mode string

const (
	// ModeDefault runs the system with its own defaults.
	ModeDefault Mode = "default"
	// ModeTuned runs the system with its polling tuned for speed.
	ModeTuned Mode = "tuned"
)

// Workload names.
const (
	W1 = "W1" // enqueue N, then drain
	W2 = "W2" // producers and consumers at once for a fixed time
	// W2Paced is W2 with the producers paced at a fixed rate every system
	// keeps up with: its latency is the dispatch delay, not queueing.
	W2Paced = "W2-paced"
	W3      = "W3" // jobs that fail twice, then succeed
	W4      = "W4" // kill -9 of the worker midway, restart
)

// Handler is the job body the harness gives every system. A nil error is a
// success, any other error asks the system to retry the job.
type Handler func(ctx context.Context, p Payload) error

// Config is what a driver needs to open its system for one run.
type Config struct {
	// Mode picks the system's defaults or its tuned polling.
	Mode Mode
	// Workload is the workload about to run (W3 and W4 change retry and
	// rescue settings).
	Workload string
	// Concurrency is how many jobs the system may run at once.
	Concurrency int
	// Dir is a private directory for embedded data (journal, SQLite file).
	Dir string
	// PostgresURL is the connection string of the PostgreSQL server.
	PostgresURL string
	// RedisAddr is the host:port of the Redis server.
	RedisAddr string
	// Fresh asks the driver to start from an empty queue (drop old jobs).
	Fresh bool
	// MaxAttempts is how many attempts a job may take (W3 and W4 need 3 or
	// more); 0 leaves the system's default.
	MaxAttempts int
}

// Setting is one named setting in effect, printed next to the numbers.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Driver runs the workloads against one system. Workers are stopped when
// a driver is opened; Start starts them and Stop stops them again.
type Driver interface {
	// Enqueue adds one job, durably on return, with one call.
	Enqueue(ctx context.Context, p Payload) error
	// EnqueueBatch adds many jobs with one call, or returns ErrNoBatch.
	EnqueueBatch(ctx context.Context, ps []Payload) error
	// Start starts running jobs with h.
	Start(ctx context.Context, h Handler) error
	// Stop stops running jobs and waits for those running to end.
	Stop(ctx context.Context) error
	// Close releases the system's resources; it may be called after Stop
	// or instead of it.
	Close(ctx context.Context) error
	// Settings lists the durability and polling settings in effect, read
	// from the system where it can tell.
	Settings(ctx context.Context) []Setting
}

// Factory opens a driver for one run.
type Factory func(ctx context.Context, cfg Config) (Driver, error)

// System describes one system under test.
type System struct {
	// Name is how the command line and the report name it.
	Name string
	// Store is what it keeps its jobs in, e.g. "PostgreSQL 15".
	Store string
	// NeedsPostgres and NeedsRedis say which server the runs need.
	NeedsPostgres, NeedsRedis bool
	// Open opens a driver.
	Open Factory
}

var (
	registryMu sync.Mutex
	registry   = map[string]System{}
)

// Register makes a system available by name. It panics on a duplicate
// name, which is a programming error.
func Register(s System) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[s.Name]; dup {
		panic(fmt.Sprintf("harness: system %q registered twice", s.Name))
	}
	registry[s.Name] = s
}

// Lookup returns the system registered under name.
func Lookup(name string) (System, error) {
	registryMu.Lock()
	defer registryMu.Unlock()
	s, ok := registry[name]
	if !ok {
		return System{}, fmt.Errorf("harness: unknown system %q (known: %v)", name, namesLocked())
	}
	return s, nil
}

// Names returns the registered systems' names, sorted.
func Names() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	return namesLocked()
}

func namesLocked() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
