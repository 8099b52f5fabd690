package report

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runlog/runlog/bench/internal/harness"
)

var update = flag.Bool("update", false, "rewrite testdata/RESULTS.golden.md")

func testInfo() Info {
	return Info{
		Machine: Machine{
			Date: "2026-11-30T10:00:00Z", CPUs: 2, CPUModel: "test CPU", Memory: "23.5 GiB", Kernel: "6.1.0",
			GoVersion: "go1.26.8", Disk: "/dev/vda ext4", FsyncP50Micros: 450, FsyncP99Micros: 4000,
			Modules: []harness.Setting{{Name: "github.com/riverqueue/river", Value: "v0.51.2"}},
		},
		Plan:     "full",
		Command:  "bench/run.sh",
		Servers:  []string{"PostgreSQL 15.18, fsync=on"},
		Notes:    []string{"a note"},
		Analysis: "Hand-written analysis.",
	}
}

// TestRenderGolden pins the report's layout; run with -update after a
// deliberate change and review the diff.
func TestRenderGolden(t *testing.T) {
	rs, err := ReadResults(filepath.Join("testdata", "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(rs, testInfo())
	golden := filepath.Join("testdata", "RESULTS.golden.md")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("Render differs from %s (run with -update to accept):\n%s", golden, got)
	}
}

func TestRenderVerdicts(t *testing.T) {
	rs, err := ReadResults(filepath.Join("testdata", "results.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	got := Render(rs, testInfo())
	for _, want := range []string{
		// 60000 / 4000 = 15×: met.
		"**W1 processing at 256:** runlog 60000 jobs/s vs best peer river-pg tuned 4000 jobs/s = 15.0×; **met**.",
		// 5000 / 215 = 23×: met; the weakly durable peer is not the best.
		"= 23.3×; **met**",
		"  - against asynq-everysec tuned (Redis appendfsync everysec: a power cut can lose the last second of acknowledged jobs): 2.38×.",
		// The failed peer run is shown as failed, not as zero.
		"| goqite tuned | 3000 | failed: drain: only 10 of 3000 jobs succeeded within 2m0s |",
		"NO: 0 missing, 1 twice, 1 extra attempts",
		"### W2 paced: 100 jobs/s, a rate every system keeps up with",
		"| river-pg tuned | 98.0 | 55.50 ms | 110.50 ms |",
		"- **W4 (runlog default):** 995 of 2000 jobs not run by the end of the 20 s window; the jobs started before the kill (3 in flight, 0 finished but run again) had not all run again by then; **not met**.",
		"- **W4 (runlog tuned):** 0 of 2000 jobs not run by the end of the 20 s window; the jobs started before the kill (2 in flight, 1 finished but run again) had all run again 0.50 s after the restart; **met**.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestRenderShortfall(t *testing.T) {
	rs := []harness.Result{
		{Label: "runlog", System: "runlog", Workload: harness.W2, Concurrency: 64, CompleteRate: 5000},
		{Label: "asynq tuned", System: "asynq", Workload: harness.W2, Concurrency: 64, CompleteRate: 1000},
	}
	got := Render(rs, Info{RunlogMissing: ""})
	want := "**not met**: short by a factor of 2.00 (runlog would need 10000 jobs/s)"
	if !strings.Contains(got, want) {
		t.Fatalf("report lacks %q:\n%s", want, got)
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		a, b float64
		want string
	}{
		{100, 1, "100×"},
		{15, 1, "15.0×"},
		{1, 2, "0.50×"},
		{0, 2, "—"},
		{2, 0, "—"},
	}
	for _, tt := range tests {
		if got := Ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestReadResultsLastRunWins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	data := `{"label":"x","workload":"W2","concurrency":1,"complete_rate":1}
{"label":"x","workload":"W2","concurrency":1,"complete_rate":2}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadResults(path)
	if err != nil {
		t.Fatal(err)
	}
	runs := index(rs).of(harness.W2, 0)
	if len(runs) != 1 || runs[0].CompleteRate != 2 {
		t.Fatalf("runs = %+v, want the second one only", runs)
	}
	if err := os.WriteFile(path, []byte("{bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadResults(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("ReadResults of a bad line = %v, want an error naming line 1", err)
	}
}

// TestRenderPGBar: runlog-pg is judged against the best River-on-PostgreSQL
// configuration (not against the other peers, nor counted as a peer of
// runlog's bar), and its W4 rescue against 10 s.
func TestRenderPGBar(t *testing.T) {
	rs := []harness.Result{
		{Label: "runlog", System: "runlog", Workload: harness.W1, Concurrency: 256, ProcessRate: 60000},
		{Label: "runlog-pg", System: "runlog-pg", Workload: harness.W1, Concurrency: 256, ProcessRate: 15000},
		{Label: "river-pg default", System: "river-pg", Workload: harness.W1, Concurrency: 256, ProcessRate: 5000},
		{Label: "river-pg tuned", System: "river-pg", Workload: harness.W1, Concurrency: 256, ProcessRate: 10000},
		{Label: "goqite tuned", System: "goqite", Workload: harness.W1, Concurrency: 256, ProcessRate: 50000},
		{Label: "runlog-pg", System: "runlog-pg", Workload: harness.W2, Concurrency: 64, CompleteRate: 1000},
		{Label: "river-pg tuned", System: "river-pg", Workload: harness.W2, Concurrency: 64, CompleteRate: 1000},
		{Label: "runlog-pg default", System: "runlog-pg", Workload: harness.W4, N: 2000, WindowSeconds: 30, Interrupted: 16, RecoverSeconds: 6.2},
		{Label: "river-pg default", System: "river-pg", Workload: harness.W4, N: 2000, WindowSeconds: 30, Interrupted: 16, Lost: 16, RecoverSeconds: -1},
	}
	got := Render(rs, Info{})
	for _, want := range []string{
		"**W1 processing at 256:** runlog 60000 jobs/s vs best peer goqite tuned 50000 jobs/s",
		"- **W1 processing at 256:** runlog-pg 15000 jobs/s vs best River-PG river-pg tuned 10000 jobs/s = 1.50×; **met**. Each River-PG configuration: river-pg default 5000 (3.00×), river-pg tuned 10000 (1.50×).",
		"- **W1 processing at 16:** runlog-pg did not run (or failed); no verdict.",
		"- **W2 completed:** runlog-pg 1000 jobs/s vs best River-PG river-pg tuned 1000 jobs/s = 1.00×; **not met**: short by a factor of 1.50 (runlog-pg would need 1500 jobs/s).",
		"- **W4 (runlog-pg default):** the jobs started before the kill (16 in flight, 0 finished but run again) had all run again 6.20 s after the restart; 0 of 2000 jobs not run by the window's end; **met**.",
		"- **W4 (river-pg default):** the jobs started before the kill (16 in flight, 0 finished but run again) had not all run again by the end of the 30 s window; 16 of 2000 jobs not run by the window's end.",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// TestProcessCell: a repeated W1 shows its median and the range of its runs.
func TestProcessCell(t *testing.T) {
	if got := processCell(harness.Result{ProcessRate: 7594}); got != "7594" {
		t.Fatalf("single run: %q", got)
	}
	if got := processCell(harness.Result{ProcessRate: 7594, ProcessRates: []float64{8100, 7594, 6900}}); got != "7594 (3 runs: 6900–8100)" {
		t.Fatalf("three runs: %q", got)
	}
}
