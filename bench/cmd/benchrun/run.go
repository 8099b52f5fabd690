package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
)

// runFlags are the flags of "run" and "worker".
type runFlags struct {
	system, label, mode, workload string
	conc, n, batch, producers     int
	outstanding, attempts         int
	duration, limit, window, body time.Duration
	rate                          float64
	dir, pg, redis                string
	cpuprofile                    string
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.system, "system", "", "system to run: "+fmt.Sprint(harness.Names()))
	fs.StringVar(&f.label, "label", "", "name of this configuration in the report (default: system and mode)")
	fs.StringVar(&f.mode, "mode", string(harness.ModeDefault), "default (the system's defaults) or tuned (polling tuned for speed)")
	fs.StringVar(&f.workload, "workload", harness.W1, "W1, W2, W2-paced, W3 or W4")
	fs.IntVar(&f.conc, "conc", 16, "jobs run at once (and enqueuing goroutines in W1)")
	fs.IntVar(&f.n, "n", 20000, "jobs (W1, W3, W4)")
	fs.IntVar(&f.batch, "batch", 1000, "batch size of batched enqueues")
	fs.IntVar(&f.producers, "producers", 16, "W2: enqueuing goroutines")
	fs.IntVar(&f.outstanding, "outstanding", 256, "W2: most jobs enqueued and not yet done")
	fs.Float64Var(&f.rate, "rate", 100, "W2-paced: enqueues per second, all producers together")
	fs.IntVar(&f.attempts, "attempts", 0, "attempts a job may take (0: the system's default)")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "W2: how long producers and consumers run")
	fs.DurationVar(&f.limit, "limit", 2*time.Minute, "bound on each wait for jobs to finish")
	fs.DurationVar(&f.window, "window", 20*time.Second, "W4: how long to watch the restarted worker")
	fs.DurationVar(&f.body, "body", time.Millisecond, "W4: duration of each job body")
	fs.StringVar(&f.dir, "dir", "", "private directory for this run's files (default: a new temp dir)")
	fs.StringVar(&f.pg, "pg", os.Getenv("BENCH_PG_URL"), "PostgreSQL URL (river-pg)")
	fs.StringVar(&f.redis, "redis", os.Getenv("BENCH_REDIS_ADDR"), "Redis host:port (asynq)")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the run (W1 to W3) to this file")
}

func (f *runFlags) config(fresh bool) harness.Config {
	return harness.Config{
		Mode:        harness.Mode(f.mode),
		Workload:    f.workload,
		Concurrency: f.conc,
		Dir:         f.dir,
		PostgresURL: f.pg,
		RedisAddr:   f.redis,
		Fresh:       fresh,
		MaxAttempts: f.attempts,
	}
}

// cmdRun runs one workload against one system and prints its Result as
// one JSON line on stdout.
func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	var f runFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	sys, err := harness.Lookup(f.system)
	if err != nil {
		return err
	}
	if f.mode != string(harness.ModeDefault) && f.mode != string(harness.ModeTuned) {
		return fmt.Errorf("-mode is %q; use default or tuned", f.mode)
	}
	if f.dir == "" {
		if f.dir, err = os.MkdirTemp("", "benchrun-"); err != nil {
			return err
		}
		defer os.RemoveAll(f.dir)
	}
	if f.label == "" {
		f.label = f.system + " " + f.mode
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	r := harness.Result{Label: f.label, System: f.system, Mode: harness.Mode(f.mode), Workload: f.workload, Concurrency: f.conc}
	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	runErr := run(ctx, sys, &f, &r)
	if runErr != nil {
		r.Error = runErr.Error()
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func run(ctx context.Context, sys harness.System, f *runFlags, r *harness.Result) error {
	if f.workload == harness.W4 {
		return runCrash(ctx, f, r)
	}
	cfg := f.config(true)
	if f.workload == harness.W3 {
		cfg.MaxAttempts = max(cfg.MaxAttempts, 3)
	}
	d, err := sys.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		if err := d.Close(cctx); err != nil {
			fmt.Fprintf(os.Stderr, "benchrun: close %s: %v\n", f.system, err)
		}
	}()
	var werr error
	switch f.workload {
	case harness.W1:
		werr = harness.RunW1(ctx, d, harness.W1Params{N: f.n, Concurrency: f.conc, BatchSize: f.batch, Limit: f.limit}, r)
	case harness.W2, harness.W2Paced:
		w2 := harness.W2Params{Duration: f.duration, Producers: f.producers, Concurrency: f.conc, Outstanding: f.outstanding}
		if f.workload == harness.W2Paced {
			w2.Rate = f.rate
		}
		werr = harness.RunW2(ctx, d, w2, r)
	case harness.W3:
		werr = harness.RunW3(ctx, d, harness.W3Params{N: f.n, Concurrency: f.conc, BatchSize: f.batch, Limit: f.limit, Settle: 500 * time.Millisecond}, r)
	default:
		return fmt.Errorf("unknown workload %q; use W1, W2, W2-paced, W3 or W4", f.workload)
	}
	r.Settings = d.Settings(ctx)
	return werr
}

// runCrash is the parent of W4: it spawns worker processes of this binary.
func runCrash(ctx context.Context, f *runFlags, r *harness.Result) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	p := harness.CrashParams{
		N:           f.n,
		KillAfter:   f.n / 2,
		Limit:       f.limit,
		Window:      f.window,
		Body:        f.body,
		StartLedger: filepath.Join(f.dir, "started.ledger"),
		DoneLedger:  filepath.Join(f.dir, "done.ledger"),
	}
	settingsFile := filepath.Join(f.dir, "settings.json")
	p.Spawn = func(first bool) (*exec.Cmd, error) {
		args := []string{"worker",
			"-system", f.system, "-mode", f.mode, "-workload", harness.W4,
			"-conc", strconv.Itoa(f.conc), "-batch", strconv.Itoa(f.batch), "-attempts", strconv.Itoa(max(f.attempts, 10)),
			"-body", f.body.String(), "-dir", f.dir, "-pg", f.pg, "-redis", f.redis,
			"-start-ledger", p.StartLedger, "-done-ledger", p.DoneLedger,
		}
		if first {
			args = append(args, "-enqueue", strconv.Itoa(f.n), "-fresh", "-settings", settingsFile)
		}
		cmd := exec.Command(self, args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		return cmd, cmd.Start()
	}
	err = harness.RunCrash(ctx, p, r)
	if b, rerr := os.ReadFile(settingsFile); rerr == nil {
		_ = json.Unmarshal(b, &r.Settings)
	}
	return err
}

// cmdWorker is a W4 worker process: it runs jobs until it is killed.
func cmdWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	var f runFlags
	f.register(fs)
	enqueue := fs.Int("enqueue", 0, "jobs to enqueue before starting the workers")
	fresh := fs.Bool("fresh", false, "start from an empty queue")
	startLedger := fs.String("start-ledger", "", "ledger of job bodies started")
	doneLedger := fs.String("done-ledger", "", "ledger of job bodies finished")
	settings := fs.String("settings", "", "file to write the settings in effect to (JSON)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *startLedger == "" || *doneLedger == "" || f.dir == "" {
		return errors.New("worker needs -start-ledger, -done-ledger and -dir")
	}
	sys, err := harness.Lookup(f.system)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := sys.Open(ctx, f.config(*fresh))
	if err != nil {
		return err
	}
	if *settings != "" {
		b, err := json.Marshal(d.Settings(ctx))
		if err != nil {
			return err
		}
		if err := os.WriteFile(*settings, b, 0o644); err != nil {
			return err
		}
	}
	err = harness.RunCrashWorker(ctx, d, harness.CrashWorkerParams{
		Enqueue:     *enqueue,
		Concurrency: f.conc,
		BatchSize:   f.batch,
		Body:        f.body,
		StartLedger: *startLedger,
		DoneLedger:  *doneLedger,
	})
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := d.Close(cctx); err == nil {
		err = cerr
	}
	return err
}
