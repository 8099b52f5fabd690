package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// The helper process: the test binary re-executes itself with
// RUNLOG_JOURNAL_HELPER set to a mode and the journal directory in
// RUNLOG_JOURNAL_DIR.
const (
	helperEnv = "RUNLOG_JOURNAL_HELPER"
	dirEnv    = "RUNLOG_JOURNAL_DIR"
	iterEnv   = "RUNLOG_JOURNAL_ITER"
)

// helperOpts are the options the helper and the parent both use.
var helperOpts = Options{SegmentSize: 32 << 10, MaxRecordSize: 1 << 10, MarkEvery: time.Millisecond} // the marker rewritten as often as kills come

// TestHelperProcess is not a test: it is the child of TestKill9Loop and
// TestLockAcrossProcesses.
func TestHelperProcess(t *testing.T) {
	t.Parallel()
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for other tests")
	}
	dir := os.Getenv(dirEnv)
	switch mode {
	case "lock":
		j, err := Open(dir, helperOpts)
		if err != nil {
			fmt.Printf("error: %v\n", err)
			os.Exit(0)
		}
		j.Close()
		fmt.Println("opened")
		os.Exit(0)
	case "append":
		helperAppend(dir, os.Getenv(iterEnv))
	}
	os.Exit(2)
}

// helperAppend appends from 8 goroutines until killed and prints
// "ack <seq> <payload>" for each record once its append returned.
func helperAppend(dir, iter string) {
	j, err := Open(dir, helperOpts)
	if err != nil {
		fmt.Printf("error: %v\n", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	print := func(first Position, recs [][]byte) {
		var b bytes.Buffer
		for i, r := range recs {
			fmt.Fprintf(&b, "ack %d %s\n", first.Seq+uint64(i), r)
		}
		mu.Lock()
		os.Stdout.Write(b.Bytes())
		mu.Unlock()
	}
	fmt.Println("ready")
	for g := range 8 {
		go func() {
			for i := 0; ; i++ {
				recs := [][]byte{[]byte(fmt.Sprintf("i%s-g%d-n%d-%s", iter, g, i, strings.Repeat("p", i%50)))}
				if i%5 == 4 {
					recs = append(recs, []byte(fmt.Sprintf("i%s-g%d-n%d-b", iter, g, i)))
				}
				first, err := j.AppendBatch(recs)
				if err != nil {
					fmt.Printf("error: %v\n", err)
					os.Exit(1)
				}
				print(first, recs)
			}
		}()
	}
	select {}
}

func helperCmd(t *testing.T, mode, dir, iter string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, dirEnv+"="+dir, iterEnv+"="+iter)
	cmd.Stderr = os.Stderr
	return cmd
}

// TestKill9Loop is checklist item 12: a child process appends from 8
// goroutines and prints each acknowledged record; it is killed with SIGKILL
// at a random moment, many times, on the real filesystem. After each kill
// every acknowledged record is in the journal, and Verify passes. Set
// RUNLOG_KILL_ITERS for more iterations.
func TestKill9Loop(t *testing.T) {
	t.Parallel()
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 5))
	dir := t.TempDir()
	acked := map[uint64]string{}
	for it := range iterations("RUNLOG_KILL_ITERS", 5, 20) {
		cmd := helperCmd(t, "append", dir, strconv.Itoa(it))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		if first := <-lines; first != "ready" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("iteration %d: child said %q", it, first)
		}
		timer := time.NewTimer(time.Duration(rng.IntN(40)) * time.Millisecond)
		n := 0
	collect:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break collect
				}
				n += parseAck(t, line, acked)
			case <-timer.C:
				cmd.Process.Kill()
				timer.C = nil
			}
		}
		cmd.Wait()
		j, err := Open(dir, helperOpts)
		if err != nil {
			t.Fatalf("iteration %d (seed %d): Open after SIGKILL: %v", it, seed, err)
		}
		got := map[uint64]string{}
		seen := map[string]bool{}
		for _, e := range readAll(t, j) {
			if seen[string(e.rec)] {
				t.Fatalf("iteration %d (seed %d): record %q is in the journal twice", it, seed, e.rec)
			}
			seen[string(e.rec)] = true
			got[e.pos.Seq] = string(e.rec)
		}
		mustClose(t, j)
		for seq, p := range acked {
			if got[seq] != p {
				t.Fatalf("iteration %d (seed %d): acknowledged record %d %q lost (found %q)", it, seed, seq, p, got[seq])
			}
		}
		mustVerify(t, vfs.OS{}, dir, helperOpts)
		t.Logf("iteration %d: %d acks this run, %d in all, %d records on disk", it, n, len(acked), len(got))
	}
}

// parseAck records an "ack <seq> <payload>" line and returns 1, or fails on
// an error line.
func parseAck(t *testing.T, line string, acked map[uint64]string) int {
	f := strings.SplitN(line, " ", 3)
	if len(f) != 3 || f[0] != "ack" {
		if strings.HasPrefix(line, "error") {
			t.Fatalf("child: %s", line)
		}
		return 0 // a line cut by the kill
	}
	seq, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	if prev, ok := acked[seq]; ok && prev != f[2] {
		t.Fatalf("seq %d acknowledged twice: %q and %q", seq, prev, f[2])
	}
	acked[seq] = f[2]
	return 1
}

// TestLockSameProcess is checklist item 24 within one process: a second
// Open of a held directory fails with ErrLocked naming the lock file, and
// the first holder is unaffected.
func TestLockSameProcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fsys vfs.FS
		dir  string
	}{{"os", vfs.OS{}, t.TempDir()}, {"mem", vfs.NewMem(), "j"}} {
		t.Run(tc.name, func(t *testing.T) {
			j := mustOpen(t, tc.fsys, tc.dir, Options{})
			_, err := Open(tc.dir, Options{FS: tc.fsys})
			if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), filepath.Join(tc.dir, "LOCK")) {
				t.Fatalf("second Open: %v; want ErrLocked naming the LOCK file", err)
			}
			if _, err := j.Append([]byte("still mine")); err != nil {
				t.Fatalf("first holder after the refused Open: %v", err)
			}
			mustClose(t, j)
			j = mustOpen(t, tc.fsys, tc.dir, Options{})
			mustClose(t, j)
		})
	}
}

// TestLockAcrossProcesses is checklist item 24: a child process opening a
// directory this process holds gets ErrLocked; after Close it can open it.
func TestLockAcrossProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	j := mustOpen(t, vfs.OS{}, dir, helperOpts)
	out, err := helperCmd(t, "lock", dir, "").Output()
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out); !strings.Contains(s, "journal: locked") || !strings.Contains(s, filepath.Join(dir, "LOCK")) {
		t.Fatalf("child opening a held journal said %q; want ErrLocked naming the LOCK file", s)
	}
	if _, err := j.Append([]byte("still mine")); err != nil {
		t.Fatal(err)
	}
	mustClose(t, j)
	out, err = helperCmd(t, "lock", dir, "").Output()
	if err != nil || strings.TrimSpace(string(out)) != "opened" {
		t.Fatalf("child after Close: %q, %v; want opened", out, err)
	}
}
