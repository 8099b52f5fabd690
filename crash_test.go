package runlog_test

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

var crashSeed = flag.Uint64("crash-seed", 0, "seed of TestCrashRecovery (0: random)")

// The crash child: set by TestCrashRecovery in the child's environment.
const (
	envCrashDir    = "RUNLOG_CRASH_DIR"
	envCrashLedger = "RUNLOG_CRASH_LEDGER"
	envCrashCycle  = "RUNLOG_CRASH_CYCLE"
)

// crashOutcome is what the crash workload's handler does with job id: it
// fails permanently when id%5 == 0 and succeeds otherwise.
func crashOutcome(id uint64) runlog.State {
	if id%5 == 0 {
		return runlog.StateFailed
	}
	return runlog.StateSucceeded
}

// crashConfig is the runner config of the crash workload. The ledger gets
// "begin <cycle> <id>" and "end <cycle> <id>" around every attempt (O_APPEND
// writes survive SIGKILL: they are in the page cache).
func crashConfig(ledger *os.File, cycle string) runlog.Config {
	return runlog.Config{
		Logger:      quietLogger(),
		Concurrency: 16,
		SegmentSize: 256 << 10,
		Retry:       runlog.RetryPolicy{Attempts: 1000, Base: time.Millisecond, Cap: 2 * time.Millisecond},
		Breaker:     runlog.BreakerConfig{Threshold: 1 << 30, Window: time.Millisecond, Cooldown: time.Millisecond, Probes: 1},
		Handlers: map[string]runlog.Handler{
			"work": runlog.Handle(func(ctx context.Context, _ []byte) error {
				info, _ := runlog.AttemptFrom(ctx)
				fmt.Fprintf(ledger, "begin %s %d\n", cycle, info.JobID)
				time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // under test: attempts in flight when the kill comes
				fmt.Fprintf(ledger, "end %s %d\n", cycle, info.JobID)
				if crashOutcome(info.JobID) == runlog.StateFailed {
					return runlog.Permanent(errors.New("refused"))
				}
				return nil
			}),
		},
	}
}

// TestMain runs the crash child when asked to.
func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashDir); dir != "" {
		crashChild(dir, os.Getenv(envCrashLedger), os.Getenv(envCrashCycle))
		return
	}
	os.Exit(m.Run())
}

// crashChild opens the runner, enqueues jobs forever and prints "ack <id>"
// for each enqueue that returned; the parent kills it with SIGKILL.
func crashChild(dir, ledgerPath, cycle string) {
	ledger, err := os.OpenFile(ledgerPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	r, err := runlog.Open(dir, crashConfig(ledger, cycle))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "open")
	out.Flush()
	for {
		n := 1 + rand.IntN(20)
		reqs := make([]runlog.JobRequest, n)
		for i := range reqs {
			reqs[i] = runlog.JobRequest{Kind: "work"}
		}
		res, err := r.EnqueueMany(context.Background(), reqs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, e := range res {
			fmt.Fprintf(out, "ack %d\n", e.ID)
		}
		out.Flush()
		time.Sleep(time.Duration(rand.IntN(2)) * time.Millisecond) // under test: enqueues spread over the run, so kills land between and within them
	}
}

// TestCrashRecovery kills a child process that enqueues and runs jobs with
// SIGKILL at random moments, many times; then it checks that no acknowledged
// job is missing, that every job ends as its handler implies, and that a job
// ran more than once only across a kill.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	cycles := 50
	if testing.Short() {
		cycles = 10
	}
	if s := os.Getenv("RUNLOG_CRASH_CYCLES"); s != "" {
		cycles, _ = strconv.Atoi(s)
	}
	seed := *crashSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -crash-seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	dir := t.TempDir()
	ledgerPath := dir + "/ledger"
	dataDir := dir + "/data"
	acked := map[uint64]bool{}

	for c := range cycles {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCrashDir+"="+dataDir, envCrashLedger+"="+ledgerPath, envCrashCycle+"="+strconv.Itoa(c))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// One cycle in four counts the kill's delay from the child's start,
		// so kills land in Open's replay too; the others count it from the
		// child's "open" line, so that a slow start (a loaded machine, the
		// race detector) still leaves time to acknowledge jobs.
		delay := time.Duration(20+rng.IntN(150)) * time.Millisecond
		var kill <-chan time.Time
		armed := rng.IntN(4) == 0
		if armed {
			kill = time.After(delay)
		}
	read:
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					break read
				}
				if l == "open" && !armed {
					armed, kill = true, time.After(delay)
				}
				if id, ok := strings.CutPrefix(l, "ack "); ok {
					n, _ := strconv.ParseUint(id, 10, 64)
					acked[n] = true
				}
			case <-kill:
				cmd.Process.Signal(syscall.SIGKILL)
				kill = nil
			}
		}
		err = cmd.Wait()
		if os.Getenv("RUNLOG_CRASH_DEBUG") != "" {
			t.Logf("cycle %d: %d acked so far; stderr: %s", c, len(acked), stderr.String())
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("cycle %d: child ended by itself (%v): %s", c, err, stderr.String())
		}
	}
	if len(acked) == 0 {
		t.Fatal("no job was acknowledged")
	}

	// Final cycle in this process: run everything to the end.
	ledger, err := os.OpenFile(ledgerPath, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	r := openRunner(t, dataDir, crashConfig(ledger, "final"))
	for id := range acked {
		if _, err := r.Job(context.Background(), id); err != nil {
			t.Fatalf("acknowledged job %d is missing after the kills: %v", id, err)
		}
	}
	for id := range acked {
		waitState(t, r, id, crashOutcome(id))
	}

	// A job begins at most once per process life, and again in a later life
	// only if its earlier attempt had not been recorded (it was killed).
	data, err := os.ReadFile(ledgerPath)
	if err != nil {
		t.Fatal(err)
	}
	begins := map[uint64][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "begin" {
			continue
		}
		id, _ := strconv.ParseUint(f[2], 10, 64)
		begins[id] = append(begins[id], f[1])
	}
	reruns := 0
	for id, cs := range begins {
		seen := map[string]bool{}
		for _, c := range cs {
			if seen[c] {
				t.Errorf("job %d began twice in life %s: %v", id, c, cs)
			}
			seen[c] = true
		}
		if len(cs) > 1 {
			reruns++
			for _, c := range cs[:len(cs)-1] {
				if c == "final" {
					t.Errorf("job %d ran again after the final, clean life: %v", id, cs)
				}
			}
		}
		j, err := r.Job(context.Background(), id)
		if err != nil {
			t.Errorf("job %d ran but is gone: %v", id, err)
			continue
		}
		// Write-ahead: an attempt begins only after its start is durable.
		if len(cs) > j.Attempts {
			t.Errorf("job %d began %d times but only %d starts were journaled", id, len(cs), j.Attempts)
		}
	}
	for id := range acked {
		if len(begins[id]) == 0 {
			t.Errorf("acknowledged job %d never ran", id)
		}
	}
	t.Logf("%d cycles, %d acknowledged jobs, %d ran again after a kill", cycles, len(acked), reruns)
}
