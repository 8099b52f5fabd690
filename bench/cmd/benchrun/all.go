package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
)

// config is one configuration of one system: a column of the report.
type config struct {
	label, system string
	mode          harness.Mode
	redis         string
	// crash says whether W4 runs for this configuration.
	crash bool
	// weak says how the configuration can lose acknowledged jobs.
	weak string
}

// entry is one run of the matrix.
type entry struct {
	cfg      config
	workload string
	conc, n  int
	extra    []string
}

// sizes are the workload sizes of a plan.
type sizes struct {
	w1N, w3N, w4N  int
	w1Conc         []int
	w2Dur          time.Duration
	w2Conc, w2Prod int
	w2Outstanding  int
	// w2PacedRate, w2PacedDur and w2PacedProd size W2-paced.
	w2PacedRate       float64
	w2PacedDur        time.Duration
	w2PacedProd       int
	w3Conc, w4Conc    int
	w4Window, w4Body  time.Duration
	childLimit, drain time.Duration
	// w1N overrides w1N for slow systems, so that the whole plan fits its
	// time budget (the report shows N per row).
	w1NFor map[string]int
	// labels, if set, limits the plan to these configurations.
	labels []string
	// w1Runs is how many times each W1 entry runs; its result is the run
	// with the median processing rate. A W1 drain here takes 0.2-4 s, and
	// the machine, shared, drifts by a third between runs minutes apart.
	w1Runs int
	// runlogCrash are the modes W4 runs runlog in: default (its default
	// retry backoff and breaker) and tuned (the fastest recovery).
	runlogCrash []harness.Mode
}

var plans = map[string]sizes{
	"full": {
		w1N: 20000, w1Conc: []int{16, 256}, w1Runs: 3,
		w2Dur: 10 * time.Second, w2Conc: 64, w2Prod: 64, w2Outstanding: 256,
		w2PacedRate: 100, w2PacedDur: 5 * time.Second, w2PacedProd: 4,
		w3N: 500, w3Conc: 16,
		w4N: 2000, w4Conc: 16, w4Window: 30 * time.Second, w4Body: 20 * time.Millisecond,
		childLimit: 4 * time.Minute, drain: 2 * time.Minute,
		// The 20000 for runlog; the peers drain at 150 to 6000
		// jobs/s here, so 20000 each would take the matrix far past its
		// 15 minutes.
		// runlog-pg runs the N of River on PostgreSQL, the system it is
		// compared with, on tables of the same size.
		w1NFor:      map[string]int{"river-pg": 5000, "runlog-pg": 5000, "river-sqlite": 5000, "goqite": 5000, "asynq": 5000},
		runlogCrash: []harness.Mode{harness.ModeDefault, harness.ModeTuned},
	},
	"smoke": {
		w1N: 500, w1Conc: []int{16},
		w2Dur: 2 * time.Second, w2Conc: 16, w2Prod: 4, w2Outstanding: 64,
		w2PacedRate: 100, w2PacedDur: time.Second, w2PacedProd: 4,
		w3N: 100, w3Conc: 16,
		w4N: 200, w4Conc: 16, w4Window: 6 * time.Second, w4Body: 20 * time.Millisecond,
		childLimit: time.Minute, drain: 30 * time.Second,
		labels: []string{"runlog", "goqite tuned"},
		// With the default breaker, the attempts a crash interrupted can
		// open it and hold the rest for its 30s cooldown, longer than the
		// smoke's window: that is a finding of the full run, not a failure.
		runlogCrash: []harness.Mode{harness.ModeTuned},
	},
}

// configs lists the configurations to run, in the order they run (which
// is the report's). River on PostgreSQL with its polling tuned, the peer
// that sets both bars on W1 in every full run so far, runs right after
// runlog: the machine is shared, its speed drifts over the minutes a
// matrix takes (runs five minutes apart differed by a third), and the
// ratios compare runs made close together.
func configs(redisAlways, redisEverysec string) []config {
	var out []config
	if slices.Contains(harness.Names(), "runlog") {
		out = append(out, config{label: "runlog", system: "runlog", mode: harness.ModeDefault, crash: true})
	}
	if slices.Contains(harness.Names(), "runlog-pg") {
		out = append(out, config{label: "runlog-pg", system: "runlog-pg", mode: harness.ModeDefault, crash: true})
	}
	out = append(out, config{label: "river-pg " + string(harness.ModeTuned), system: "river-pg", mode: harness.ModeTuned, crash: true})
	for _, m := range []harness.Mode{harness.ModeDefault, harness.ModeTuned} {
		for _, c := range []config{
			{label: "river-pg " + string(m), system: "river-pg", mode: m, crash: true},
			{label: "river-sqlite " + string(m), system: "river-sqlite", mode: m, crash: true},
			{label: "goqite " + string(m), system: "goqite", mode: m, crash: true},
			{label: "asynq-always " + string(m), system: "asynq", mode: m, redis: redisAlways, crash: true},
			// W4 kills the worker, not Redis: it is the same for both
			// appendfsync settings, so it runs once, with "always".
			{label: "asynq-everysec " + string(m), system: "asynq", mode: m, redis: redisEverysec,
				weak: "Redis appendfsync everysec: a power cut can lose the last second of acknowledged jobs"},
		} {
			if c.system == "river-pg" && m == harness.ModeTuned {
				continue // ran above
			}
			out = append(out, c)
		}
	}
	return out
}

// matrix expands configurations into runs.
func matrix(cfgs []config, s sizes) []entry {
	var out []entry
	for _, c := range cfgs {
		n := s.w1N
		if v, ok := s.w1NFor[c.system]; ok {
			n = v
		}
		for _, conc := range s.w1Conc {
			out = append(out, entry{cfg: c, workload: harness.W1, conc: conc, n: n})
		}
		out = append(out, entry{cfg: c, workload: harness.W2, conc: s.w2Conc, extra: []string{
			"-duration", s.w2Dur.String(), "-producers", strconv.Itoa(s.w2Prod), "-outstanding", strconv.Itoa(s.w2Outstanding)}})
		out = append(out, entry{cfg: c, workload: harness.W2Paced, conc: s.w2Conc, extra: []string{
			"-duration", s.w2PacedDur.String(), "-producers", strconv.Itoa(s.w2PacedProd), "-outstanding", strconv.Itoa(s.w2Outstanding),
			"-rate", strconv.FormatFloat(s.w2PacedRate, 'f', -1, 64)}})
		out = append(out, entry{cfg: c, workload: harness.W3, conc: s.w3Conc, n: s.w3N})
	}
	for _, c := range cfgs {
		if !c.crash {
			continue
		}
		modes := []harness.Mode{c.mode}
		if isRunlog(c.system) {
			// runlog has no polling, but W4 compares its defaults with
			// its fastest recovery (retry base 0, no breaker; on
			// PostgreSQL a 1s lease).
			modes = s.runlogCrash
		}
		for _, m := range modes {
			cc := c
			cc.mode = m
			if isRunlog(c.system) {
				cc.label = c.system + " " + string(m)
			}
			out = append(out, entry{cfg: cc, workload: harness.W4, conc: s.w4Conc, n: s.w4N, extra: []string{
				"-window", s.w4Window.String(), "-body", s.w4Body.String()}})
		}
	}
	return out
}

// cmdAll runs the matrix, one child process per run, appending each
// result to -out as it arrives.
func cmdAll(args []string) error {
	fs := flag.NewFlagSet("all", flag.ExitOnError)
	planName := fs.String("plan", "full", "full or smoke")
	out := fs.String("out", "results.jsonl", "file the results are appended to, one JSON per line")
	only := fs.String("systems", "", "comma-separated systems to run, e.g. runlog,goqite (default: all registered)")
	pg := fs.String("pg", os.Getenv("BENCH_PG_URL"), "PostgreSQL URL (river-pg)")
	redisAlways := fs.String("redis-always", os.Getenv("BENCH_REDIS_ALWAYS"), "Redis with appendfsync always")
	redisEverysec := fs.String("redis-everysec", os.Getenv("BENCH_REDIS_EVERYSEC"), "Redis with appendfsync everysec")
	strict := fs.Bool("strict", false, "exit 1 if a run failed, or a job was lost or ran twice where the workload forbids it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, ok := plans[*planName]
	if !ok {
		return fmt.Errorf("-plan is %q; use full or smoke", *planName)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var cfgs []config
	for _, c := range configs(*redisAlways, *redisEverysec) {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), c.system) ||
			s.labels != nil && !slices.Contains(s.labels, c.label) {
			continue
		}
		sys, err := harness.Lookup(c.system)
		if err != nil {
			return err
		}
		if sys.NeedsPostgres && *pg == "" || sys.NeedsRedis && c.redis == "" {
			fmt.Fprintf(os.Stderr, "skip %s: its server is not given\n", c.label)
			continue
		}
		cfgs = append(cfgs, c)
	}
	runs := matrix(cfgs, s)
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	begin := time.Now()
	var bad []string
	for i, e := range runs {
		times := 1
		if e.workload == harness.W1 {
			times = max(s.w1Runs, 1)
		}
		var rs []harness.Result
		for range times {
			fmt.Fprintf(os.Stderr, "[%2d/%d %5.0fs] %-22s %s c=%-3d ", i+1, len(runs), time.Since(begin).Seconds(), e.cfg.label, e.workload, e.conc)
			r := runChild(self, e, s, *pg)
			fmt.Fprintln(os.Stderr, summary(r))
			rs = append(rs, r)
		}
		r := median(rs)
		if p := problem(r); p != "" {
			bad = append(bad, fmt.Sprintf("%s %s c=%d: %s", r.Label, r.Workload, r.Concurrency, p))
		}
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := f.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "%d runs in %.0fs\n", len(runs), time.Since(begin).Seconds())
	for _, b := range bad {
		fmt.Fprintln(os.Stderr, "problem:", b)
	}
	if *strict && len(bad) > 0 {
		return fmt.Errorf("%d of %d runs had a problem", len(bad), len(runs))
	}
	return nil
}

// median returns the run of rs with the median processing rate (the lower
// middle one of an even count) and every run's rate in ProcessRates; a
// run with a problem is returned instead, so that the report shows it.
func median(rs []harness.Result) harness.Result {
	if len(rs) == 1 {
		return rs[0]
	}
	rates := make([]float64, len(rs))
	for i, r := range rs {
		if problem(r) != "" {
			return r
		}
		rates[i] = r.ProcessRate
	}
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b harness.Result) int { return cmp.Compare(a.ProcessRate, b.ProcessRate) })
	m := sorted[(len(sorted)-1)/2]
	m.ProcessRates = rates
	return m
}

// problem says what is wrong with a run: an error, a W1 or W3 job that
// did not run exactly once, or a runlog W4 job not run again.
func problem(r harness.Result) string {
	switch {
	case r.Error != "":
		return r.Error
	case (r.Workload == harness.W1 || r.Workload == harness.W3) && (r.Missing > 0 || r.Duplicates > 0 || r.ExtraAttempts > 0):
		return fmt.Sprintf("%d missing, %d twice, %d extra attempts", r.Missing, r.Duplicates, r.ExtraAttempts)
	case r.Workload == harness.W4 && isRunlog(r.System) && r.Lost > 0:
		return fmt.Sprintf("%d jobs not run again after the restart", r.Lost)
	}
	return ""
}

// isRunlog reports whether system is one of runlog's (embedded or on
// PostgreSQL), not a peer.
func isRunlog(system string) bool { return system == "runlog" || system == "runlog-pg" }

// runChild runs one entry in a child process and returns its result; a
// child that fails or times out yields a result with Error set.
func runChild(self string, e entry, s sizes, pg string) (r harness.Result) {
	r = harness.Result{Label: e.cfg.label, System: e.cfg.system, Mode: e.cfg.mode, Workload: e.workload, Concurrency: e.conc, N: e.n}
	// The child does not know; set it on every way out (r is named).
	defer func() { r.WeakDurability = e.cfg.weak }()
	dir, err := os.MkdirTemp("", "benchrun-")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer os.RemoveAll(dir)
	args := []string{"run", "-system", e.cfg.system, "-label", e.cfg.label, "-mode", string(e.cfg.mode),
		"-workload", e.workload, "-conc", strconv.Itoa(e.conc), "-n", strconv.Itoa(e.n),
		"-limit", s.drain.String(), "-dir", dir, "-pg", pg, "-redis", e.cfg.redis}
	args = append(args, e.extra...)
	ctx, cancel := context.WithTimeout(context.Background(), s.childLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte{'\n'})
	if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
		r.Error = fmt.Sprintf("child gave no result (%v): %s", runErr, tail(stderr.String(), 600))
		return r
	}
	if r.MaxRSSKiB == 0 {
		r.MaxRSSKiB = harness.MaxRSSKiB(cmd.ProcessState)
	}
	if r.Error != "" && stderr.Len() > 0 {
		r.Error += " | stderr: " + tail(stderr.String(), 600)
	}
	return r
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return strings.ReplaceAll(s, "\n", " / ")
}

// summary is the progress line of one run.
func summary(r harness.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs ", r.WallSeconds)
	switch r.Workload {
	case harness.W1:
		fmt.Fprintf(&b, "enqueue %.0f/s batched %.0f/s process %.0f/s", r.EnqueueRate, r.EnqueueBatchRate, r.ProcessRate)
	case harness.W2, harness.W2Paced:
		fmt.Fprintf(&b, "%.0f jobs/s p50 %.1fms p99 %.1fms", r.CompleteRate, r.P50Millis, r.P99Millis)
	case harness.W3:
		fmt.Fprintf(&b, "%.0f jobs/s missing %d dup %d extra %d", r.CompleteRate, r.Missing, r.Duplicates, r.ExtraAttempts)
	case harness.W4:
		fmt.Fprintf(&b, "interrupted %d lost %d twice %d recover %.2fs all %.2fs", r.Interrupted, r.Lost, r.Twice, r.RecoverSeconds, r.AllDoneSeconds)
	}
	fmt.Fprintf(&b, " rss %dMiB", r.MaxRSSKiB/1024)
	if r.Error != "" {
		fmt.Fprintf(&b, " ERROR: %s", tail(r.Error, 300))
	}
	return b.String()
}
