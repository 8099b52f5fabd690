package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/journal"
)

// buildJournal writes a journal of n pending jobs with the engine and
// returns its directory and the segment file's path.
func buildJournal(t *testing.T, n int) (dir, seg string) {
	t.Helper()
	dir = t.TempDir()
	r, err := runlog.Open(dir, runlog.Config{Handlers: map[string]runlog.Handler{
		"noop": runlog.Handle(func(context.Context, json.RawMessage) error { return nil }),
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := r.Enqueue(context.Background(), "noop", map[string]int{"i": i}, runlog.RunIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) != 1 {
		t.Fatalf("want one segment in %s, got %v (%v)", dir, segs, err)
	}
	return dir, segs[0]
}

func TestJournalVerifyExitCodes(t *testing.T) {
	dir, seg := buildJournal(t, 20)
	var (
		last    journal.Position
		lastLen int
	)
	if err := journal.Scan(nil, dir, journal.Options{}, func(pos journal.Position, rec []byte) error {
		last, lastLen = pos, len(rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	end := last.Offset + journal.FrameHeaderSize + int64(lastLen+7)&^7 // frames are 8-byte aligned

	code, out, errOut := runCLI(t, nil, "journal", "verify", dir)
	if code != exitOK || !strings.Contains(out, "records: 20") || !strings.Contains(out, "ok") {
		t.Fatalf("clean journal: exit %d\n%s%s", code, out, errOut)
	}

	// A torn tail: a group commit whose fdatasync never returned left half
	// a frame after the last record.
	f, err := os.OpenFile(seg, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	torn := make([]byte, journal.FrameHeaderSize+20)
	torn[0] = 100 // a length of 100 bytes, of which only 20 arrived
	torn[4], torn[5] = 0xde, 0xad
	for i := journal.FrameHeaderSize; i < len(torn); i++ {
		torn[i] = byte(i)
	}
	if _, err := f.WriteAt(torn, end); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "journal", "verify", dir)
	if code != exitTorn || !strings.Contains(out, "torn tail") || !strings.Contains(out, "opening the journal") || !strings.Contains(out, seg) {
		t.Fatalf("torn tail: exit %d; want %d naming the file and the repair\n%s%s", code, exitTorn, out, errOut)
	}
	// Opening the journal repairs it; verify is then clean with every record.
	r, err := runlog.Open(dir, runlog.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "journal", "verify", dir)
	if code != exitOK || !strings.Contains(out, "records: 20") {
		t.Fatalf("after the repair: exit %d\n%s%s", code, out, errOut)
	}

	// Corruption: a flipped byte in the first record, valid records after it.
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	off := journal.HeaderSize + journal.FrameHeaderSize + 2
	data[off] ^= 0x40
	if err := os.WriteFile(seg, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "journal", "verify", dir)
	if code != exitCorrupt || !strings.Contains(out, "corrupt") || !strings.Contains(out, "file: "+seg) || !strings.Contains(out, "offset: ") {
		t.Fatalf("corruption: exit %d; want %d with file and offset\n%s%s", code, exitCorrupt, out, errOut)
	}
	if code, _, _ := runCLI(t, nil, "journal", "dump", dir); code != exitCorrupt {
		t.Errorf("dump of a corrupt journal: exit %d; want %d", code, exitCorrupt)
	}

	if code, _, _ := runCLI(t, nil, "journal", "verify"); code != exitUsage {
		t.Errorf("verify without DIR: exit %d; want %d", code, exitUsage)
	}
}

func TestJournalDump(t *testing.T) {
	dir, _ := buildJournal(t, 5)
	code, out, errOut := runCLI(t, nil, "journal", "dump", dir)
	if code != exitOK {
		t.Fatalf("dump: exit %d %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 5 {
		t.Fatalf("dump printed %d lines; want at least the 5 enqueues\n%s", len(lines), out)
	}
	enqueues := 0
	for i, l := range lines {
		if !strings.HasPrefix(l, "seq=") || !strings.Contains(l, " segment=") || !strings.Contains(l, " offset=") || !strings.Contains(l, " op=") {
			t.Errorf("line %d %q lacks seq, segment, offset or op", i, l)
		}
		if strings.Contains(l, `kind="noop"`) && strings.Contains(l, `payload="{\"i\":`) {
			enqueues++
		}
	}
	if enqueues != 5 {
		t.Errorf("dump shows %d enqueues with kind and payload; want 5\n%s", enqueues, out)
	}
}
