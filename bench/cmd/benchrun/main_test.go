package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
)

// TestMain lets the test binary act as benchrun: W4 re-executes
// os.Executable() as "worker".
func TestMain(m *testing.M) {
	if os.Getenv("BENCHRUN_AS_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Setenv("BENCHRUN_AS_MAIN", "1") // for the children
	code := m.Run()
	os.Exit(code)
}

// runCmd runs "benchrun run" with args in this process and returns the
// result it prints.
func runCmd(t *testing.T, args ...string) harness.Result {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	out := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); out <- b }()
	runErr := cmdRun(append(args, "-dir", t.TempDir()))
	os.Stdout = stdout
	w.Close()
	b := <-out
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	var res harness.Result
	if err := json.Unmarshal(bytes.TrimSpace(b), &res); err != nil {
		t.Fatalf("run printed %q: %v", b, err)
	}
	if res.Error != "" {
		t.Fatalf("run failed: %s", res.Error)
	}
	return res
}

// TestCrashRecoversEveryJob runs W4 end to end: real worker processes, a
// real kill -9 and a real restart, on the systems that need no server.
func TestCrashRecoversEveryJob(t *testing.T) {
	systems := []string{"goqite"}
	if _, err := harness.Lookup("runlog"); err == nil {
		systems = append(systems, "runlog")
	}
	for _, sys := range systems {
		t.Run(sys, func(t *testing.T) {
			r := runCmd(t, "-system", sys, "-mode", "tuned", "-workload", "W4", "-n", "300", "-conc", "8", "-body", "5ms", "-window", "15s")
			if r.Lost != 0 || r.AllDoneSeconds < 0 || r.RecoverSeconds < 0 {
				t.Fatalf("W4 on %s: %d not run, all done after %v s, in-flight re-run after %v s; want 0 and both set", sys, r.Lost, r.AllDoneSeconds, r.RecoverSeconds)
			}
			if r.MaxRSSKiB <= 0 || len(r.Settings) == 0 {
				t.Fatalf("W4 on %s: rss %d, %d settings; want both", sys, r.MaxRSSKiB, len(r.Settings))
			}
		})
	}
}

func TestRunW1(t *testing.T) {
	r := runCmd(t, "-system", "goqite", "-mode", "tuned", "-workload", "W1", "-n", "100", "-conc", "4")
	if r.N != 100 || r.Missing != 0 || r.Duplicates != 0 || r.ProcessRate <= 0 || r.Label != "goqite tuned" {
		t.Fatalf("W1: %+v", r)
	}
}

func TestMatrix(t *testing.T) {
	cfgs := configs("127.0.0.1:1", "127.0.0.1:2")
	runs := matrix(cfgs, plans["full"])
	count := map[string]int{}
	for _, e := range runs {
		count[e.workload]++
		if e.workload == harness.W4 && strings.HasPrefix(e.cfg.label, "asynq-everysec") {
			t.Errorf("W4 runs for %s, but killing the worker does not depend on Redis's fsync", e.cfg.label)
		}
		// runlog-pg too: it runs River-PG's N.
		if e.workload == harness.W1 && e.cfg.system != "runlog" && e.n != 5000 {
			t.Errorf("%s W1 N = %d, want the peers' 5000", e.cfg.label, e.n)
		}
	}
	peers := len(cfgs)
	crash := 0
	for _, c := range cfgs {
		if c.crash {
			crash++
			if isRunlog(c.system) {
				crash++ // default and tuned
			}
		}
	}
	want := map[string]int{harness.W1: 2 * peers, harness.W2: peers, harness.W2Paced: peers, harness.W3: peers, harness.W4: crash}
	for w, n := range want {
		if count[w] != n {
			t.Errorf("%s runs = %d, want %d", w, count[w], n)
		}
	}
}

func TestProblem(t *testing.T) {
	tests := []struct {
		r    harness.Result
		want bool
	}{
		{harness.Result{Workload: harness.W1}, false},
		{harness.Result{Workload: harness.W1, Error: "boom"}, true},
		{harness.Result{Workload: harness.W1, Duplicates: 1}, true},
		{harness.Result{Workload: harness.W3, ExtraAttempts: 1}, true},
		{harness.Result{Workload: harness.W4, System: "runlog", Lost: 1}, true},
		{harness.Result{Workload: harness.W4, System: "runlog-pg", Lost: 1}, true},
		// A peer that rescues after the window is reported, not a failure.
		{harness.Result{Workload: harness.W4, System: "asynq", Lost: 1}, false},
	}
	for _, tt := range tests {
		if got := problem(tt.r) != ""; got != tt.want {
			t.Errorf("problem(%+v) = %v, want %v", tt.r, got, tt.want)
		}
	}
}

// TestRunChildMarksWeakDurability runs one child process the way "all"
// does and checks that the configuration's weak durability reaches the
// result the report reads.
func TestRunChildMarksWeakDurability(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := entry{
		cfg:      config{label: "goqite weak", system: "goqite", mode: harness.ModeTuned, weak: "loses the last second"},
		workload: harness.W1, conc: 4, n: 50,
	}
	r := runChild(self, e, plans["smoke"], "")
	if r.Error != "" {
		t.Fatalf("child failed: %s", r.Error)
	}
	if r.WeakDurability != "loses the last second" || r.Label != "goqite weak" || r.MaxRSSKiB <= 0 {
		t.Fatalf("result %+v: want the weak durability, the label and the child's RSS", r)
	}
	for _, c := range configs("a", "b") {
		if strings.HasPrefix(c.label, "asynq-everysec") != (c.weak != "") {
			t.Errorf("%s: weak = %q; only asynq-everysec can lose acknowledged jobs", c.label, c.weak)
		}
	}
}

// TestMedian: a repeated W1 keeps the run with the median processing rate
// and every run's rate; a run with a problem wins, so that it is reported.
func TestMedian(t *testing.T) {
	w1 := func(rate float64) harness.Result {
		return harness.Result{Workload: harness.W1, N: 10, ProcessRate: rate}
	}
	m := median([]harness.Result{w1(300), w1(100), w1(200)})
	if m.ProcessRate != 200 || !slices.Equal(m.ProcessRates, []float64{300, 100, 200}) {
		t.Fatalf("median = %v %v, want 200 and the three rates in run order", m.ProcessRate, m.ProcessRates)
	}
	if m := median([]harness.Result{w1(100), w1(200)}); m.ProcessRate != 100 {
		t.Fatalf("median of two = %v, want the lower", m.ProcessRate)
	}
	bad := w1(50)
	bad.Missing = 1
	if m := median([]harness.Result{w1(100), bad, w1(200)}); m.Missing != 1 {
		t.Fatalf("median hid a run with a missing job: %+v", m)
	}
	if m := median([]harness.Result{w1(100)}); m.ProcessRates != nil {
		t.Fatalf("a single run got ProcessRates %v", m.ProcessRates)
	}
}
