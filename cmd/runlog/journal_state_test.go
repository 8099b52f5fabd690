package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestJournalStateCompactAndDump drives a runner through a short history,
// then rebuilds past states with `journal state --at`, compacts offline and
// checks that dump shows the snapshot.
func TestJournalStateCompactAndDump(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	done := make(chan struct{}, 3)
	// Two snapshots kept, so that the journal since the first is there to
	// travel through (with one, the snapshot at Close drops it).
	r, err := runlog.Open(dir, runlog.Config{SegmentSize: 64 << 10, KeepSnapshots: 2, Handlers: map[string]runlog.Handler{
		"ok":  runlog.Handle(func(context.Context, []byte) error { done <- struct{}{}; return nil }),
		"bad": runlog.Handle(func(context.Context, []byte) error { done <- struct{}{}; return runlog.Permanent(errors.New("no")) }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, kind := range []string{"ok", "ok", "bad"} {
		if _, err := r.Enqueue(ctx, kind, nil); err != nil {
			t.Fatal(err)
		}
		<-done
	}
	testwait.Until(t, "2 succeeded and 1 failed job", func() (runlog.Stats, bool) {
		st, _ := r.Stats(ctx)
		return st, st.Succeeded == 2 && st.Failed == 1
	})
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := runJournal(args, &out, &errb)
		return out.String() + errb.String(), code
	}
	out, code := run("state", dir)
	if code != exitOK || !strings.Contains(out, "jobs=3 pending=0 running=0 succeeded=2 failed=1") {
		t.Fatalf("state now (exit %d):\n%s", code, out)
	}
	// Record 1 is the first enqueue: one pending job, nothing else yet.
	out, code = run("state", dir, "--at", "1")
	if code != exitOK || !strings.Contains(out, "state at record 1: jobs=1 pending=1") {
		t.Fatalf("state at 1 (exit %d):\n%s", code, out)
	}
	out, code = run("snapshot", dir)
	if code != exitOK || !strings.Contains(out, "disk:") {
		t.Fatalf("compact (exit %d):\n%s", code, out)
	}
	out, code = run("dump", dir)
	if code != exitOK || !strings.Contains(out, "snapshot covers=") || !strings.Contains(out, "succeeded=2 failed=1") {
		t.Fatalf("dump (exit %d):\n%s", code, out)
	}
	if _, code = run("state", dir, "--at", "999999"); code != exitFailure {
		t.Fatalf("state past the end: exit %d", code)
	}
}

// TestJournalCompactSegmentSize (issue 14 item 9): offline compaction
// preallocated 64 MiB segments where the server uses 16 MiB
// (runlog.DefaultSegmentSize), growing a directory by 48 MiB.
func TestJournalCompactSegmentSize(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r, err := runlog.Open(dir, runlog.Config{Handlers: map[string]runlog.Handler{
		"ok": runlog.Handle(func(context.Context, []byte) error { return nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := r.Enqueue(ctx, "ok", nil, runlog.RunAt(time.Now().Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := runJournal([]string{"snapshot", dir}, &out, &errb); code != exitOK {
		t.Fatalf("compact (exit %d):\n%s%s", code, out.String(), errb.String())
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments after compact: %v, %v", segs, err)
	}
	for _, s := range segs {
		fi, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > runlog.DefaultSegmentSize {
			t.Errorf("%s is %d bytes after compact; want at most the server's segment size, %d", s, fi.Size(), runlog.DefaultSegmentSize)
		}
	}
}

// TestJournalSnapshotIsTheOnlyName (issue 15): writing a snapshot offline
// is `journal snapshot`, the word the library (Runner.Snapshot) and the
// docs use; the usage names only it, and the old name `journal compact`
// still does the same (scripts use it) while saying the new one.
func TestJournalSnapshotIsTheOnlyName(t *testing.T) {
	dir := t.TempDir()
	r, err := runlog.Open(dir, runlog.Config{Handlers: map[string]runlog.Handler{"ok": runlog.Handle(func(context.Context, []byte) error { return nil })}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := runJournal([]string{"compact", dir}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "runlog journal snapshot DIR") || !strings.Contains(out.String(), "snapshot covers record") {
		t.Fatalf("journal compact: exit %d, stdout %q, stderr %q; want it to write the snapshot and name `journal snapshot`", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	runJournal(nil, &out, &errb)
	if usage := errb.String(); !strings.Contains(usage, "snapshot DIR") || strings.Contains(usage, "compact") {
		t.Errorf("usage %q: want `snapshot DIR` and no `compact`", usage)
	}
	if code := runJournal([]string{"snapshot", dir}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "snapshot covers record") {
		t.Fatalf("journal snapshot: exit %d\n%s%s", code, out.String(), errb.String())
	}
}
