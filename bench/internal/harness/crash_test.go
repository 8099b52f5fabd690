package harness

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestLedgerRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	r := NewLedgerReader(path)
	if ids, err := r.Next(); err != nil || ids != nil {
		t.Fatalf("Next on a missing ledger = %v, %v; want nothing", ids, err)
	}
	l, err := OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []int64{3, 1, 4} {
		if err := l.Append(id); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := r.Next()
	if err != nil || !slices.Equal(ids, []int64{3, 1, 4}) {
		t.Fatalf("Next = %v, %v; want [3 1 4]", ids, err)
	}
	if err := l.Append(1); err != nil {
		t.Fatal(err)
	}
	ids, err = r.Next()
	if err != nil || !slices.Equal(ids, []int64{1}) {
		t.Fatalf("Next after one more = %v, %v; want [1]", ids, err)
	}
}

func TestLedgerReaderWaitsForTheNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	if err := os.WriteFile(path, []byte("12\n3"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewLedgerReader(path)
	if ids, err := r.Next(); err != nil || !slices.Equal(ids, []int64{12}) {
		t.Fatalf("Next = %v, %v; want [12] and the partial line kept", ids, err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("4\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if ids, err := r.Next(); err != nil || !slices.Equal(ids, []int64{34}) {
		t.Fatalf("Next = %v, %v; want [34]", ids, err)
	}
}

func TestParseLedgerRejects(t *testing.T) {
	for _, in := range []string{"x\n", "1\n\n", "1"} {
		if _, err := ParseLedger([]byte(in)); err == nil {
			t.Errorf("ParseLedger(%q) succeeded, want an error", in)
		}
	}
}

// FuzzParseLedger checks that no input panics the parser and that the ids
// it accepts, written back, parse to the same ids.
func FuzzParseLedger(f *testing.F) {
	f.Add([]byte("1\n2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := ParseLedger(b)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		for _, id := range ids {
			buf.WriteString(strconv.FormatInt(id, 10) + "\n")
		}
		again, err := ParseLedger(buf.Bytes())
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("ids %v written back parse to %v, %v", ids, again, err)
		}
	})
}

// The helper process plays a W4 worker over a fake queue kept in the
// ledgers themselves: the first run does jobs 0..n-1 in order; a restart
// does every job without a done line, after first re-running the last
// done job (a finish its system had not recorded) unless told to lose
// everything.
const helperEnv = "HARNESS_CRASH_HELPER"

func TestHelperCrashWorker(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("run by TestRunCrash as a child process")
	}
	n, _ := strconv.Atoi(os.Getenv("HELPER_N"))
	dir := os.Getenv("HELPER_DIR")
	started, err := OpenLedger(filepath.Join(dir, "started"))
	if err != nil {
		t.Fatal(err)
	}
	done, err := OpenLedger(filepath.Join(dir, "done"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(id int64) {
		_ = started.Append(id)
		time.Sleep(time.Millisecond) // under test: work between the two ledger writes
		_ = done.Append(id)
	}
	switch mode {
	case "first":
		for id := range int64(n) {
			run(id)
		}
	case "restart":
		ids, err := NewLedgerReader(filepath.Join(dir, "done")).Next()
		if err != nil {
			t.Fatal(err)
		}
		have := map[int64]bool{}
		for _, id := range ids {
			have[id] = true
		}
		run(ids[len(ids)-1])
		for id := range int64(n) {
			if !have[id] {
				run(id)
			}
		}
	case "lose":
	}
	time.Sleep(time.Hour) // until killed
}

func TestRunCrash(t *testing.T) {
	tests := []struct {
		name    string
		restart string
		check   func(t *testing.T, r Result)
	}{
		{"restart runs the rest", "restart", func(t *testing.T, r Result) {
			if r.Lost != 0 || r.Twice != 1 || r.AllDoneSeconds < 0 || r.RecoverSeconds < 0 {
				t.Fatalf("got lost %d twice %d all-done %v recover %v; want 0, 1 and both times set", r.Lost, r.Twice, r.AllDoneSeconds, r.RecoverSeconds)
			}
		}},
		{"restart runs nothing", "lose", func(t *testing.T, r Result) {
			if r.Lost == 0 || r.AllDoneSeconds != -1 {
				t.Fatalf("got lost %d all-done %v; want jobs lost and no all-done time", r.Lost, r.AllDoneSeconds)
			}
			if r.Interrupted > 0 && r.RecoverSeconds != -1 {
				t.Fatalf("%d in flight never re-ran, yet recover = %v", r.Interrupted, r.RecoverSeconds)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			const n = 400
			p := CrashParams{
				N: n, KillAfter: n / 2, Limit: 20 * time.Second, Window: 2 * time.Second, Body: time.Millisecond,
				StartLedger: filepath.Join(dir, "started"), DoneLedger: filepath.Join(dir, "done"),
				Spawn: func(first bool) (*exec.Cmd, error) {
					mode := tt.restart
					if first {
						mode = "first"
					}
					cmd := exec.Command(os.Args[0], "-test.run=^TestHelperCrashWorker$")
					cmd.Env = append(os.Environ(), helperEnv+"="+mode, "HELPER_N="+strconv.Itoa(n), "HELPER_DIR="+dir)
					return cmd, cmd.Start()
				},
			}
			var r Result
			if err := RunCrash(context.Background(), p, &r); err != nil {
				t.Fatal(err)
			}
			if r.N != n || r.WindowSeconds != 2 || r.MaxRSSKiB <= 0 {
				t.Fatalf("N %d window %v rss %d: the bookkeeping is wrong", r.N, r.WindowSeconds, r.MaxRSSKiB)
			}
			tt.check(t, r)
		})
	}
}
