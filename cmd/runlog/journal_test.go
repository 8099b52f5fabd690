package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/state"
)

// journalLayout is what a test needs to know of a journal directory: its
// segment files, oldest first, and where each record lies.
type journalLayout struct {
	segs    []string
	records []journal.Position
	lens    []int
}

// buildJournal writes a journal of n pending jobs with the engine (however
// it lays out segments) and returns its directory and layout.
func buildJournal(t *testing.T, n int) (string, journalLayout) {
	t.Helper()
	dir := t.TempDir()
	// Two snapshots kept: the snapshot at Close then drops no record, and
	// the tests see the whole journal.
	r, err := runlog.Open(dir, runlog.Config{KeepSnapshots: 2, Handlers: map[string]runlog.Handler{
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
	return dir, layout(t, dir)
}

func layout(t *testing.T, dir string) journalLayout {
	t.Helper()
	var l journalLayout
	var err error
	if l.segs, err = filepath.Glob(filepath.Join(dir, "*.seg")); err != nil || len(l.segs) == 0 {
		t.Fatalf("no segment in %s (%v)", dir, err)
	}
	sort.Strings(l.segs) // zero-padded indexes: name order is index order
	if err := journal.Scan(nil, dir, journal.Options{}, func(pos journal.Position, rec []byte) error {
		l.records = append(l.records, pos)
		l.lens = append(l.lens, len(rec))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return l
}

// segPath is the file of segment index.
func (l journalLayout) segPath(index uint64) string {
	return filepath.Join(filepath.Dir(l.segs[0]), fmt.Sprintf("%020d.seg", index))
}

func TestJournalVerifyExitCodes(t *testing.T) {
	t.Parallel()
	dir, l := buildJournal(t, 20)
	total := len(l.records)
	if total < 20 {
		t.Fatalf("the journal has %d records; want the 20 enqueues at least", total)
	}
	records := fmt.Sprintf("records: %d\n", total)
	code, out, errOut := runCLI(t, nil, "journal", "verify", dir)
	if code != exitOK || !strings.Contains(out, records) || !strings.Contains(out, "ok") {
		t.Fatalf("clean journal: exit %d; want 0 and %q\n%s%s", code, records, out, errOut)
	}

	// A torn tail: a group commit whose fdatasync never returned left half
	// a frame after the newest segment's last record.
	newest := l.segs[len(l.segs)-1]
	end := int64(journal.HeaderSize)
	if last := len(l.records) - 1; l.segPath(l.records[last].Segment) == newest {
		end = l.records[last].Offset + journal.FrameHeaderSize + int64(l.lens[last]+7)&^7 // frames are 8-byte aligned
	}
	f, err := os.OpenFile(newest, os.O_WRONLY, 0)
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
	if code != exitTorn || !strings.Contains(out, "torn tail") || !strings.Contains(out, "opening the journal") || !strings.Contains(out, newest) {
		t.Fatalf("torn tail: exit %d; want %d naming the file and the repair\n%s%s", code, exitTorn, out, errOut)
	}
	// Opening the journal repairs it; verify is then clean with every record.
	r, err := runlog.Open(dir, runlog.Config{KeepSnapshots: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "journal", "verify", dir)
	if code != exitOK {
		t.Fatalf("after the repair: exit %d\n%s%s", code, out, errOut)
	}

	// Corruption: a flipped byte in a record that has valid records after
	// it in the same segment.
	l = layout(t, dir)
	victim := -1
	for i := 0; i+1 < len(l.records); i++ {
		if l.records[i].Segment == l.records[i+1].Segment {
			victim = i
			break
		}
	}
	if victim < 0 {
		t.Fatal("no segment holds two records")
	}
	seg := l.segPath(l.records[victim].Segment)
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	data[l.records[victim].Offset+journal.FrameHeaderSize+2] ^= 0x40
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
	t.Parallel()
	dir, l := buildJournal(t, 5)
	code, out, errOut := runCLI(t, nil, "journal", "dump", dir)
	if code != exitOK {
		t.Fatalf("dump: exit %d %s", code, errOut)
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "snapshot ") { // snapshots are listed first
			lines = append(lines, line)
		}
	}
	if len(lines) != len(l.records) {
		t.Fatalf("dump printed %d record lines; want one per record (%d)\n%s", len(lines), len(l.records), out)
	}
	enqueues := 0
	for i, line := range lines {
		pos := l.records[i]
		prefix := fmt.Sprintf("seq=%d segment=%d offset=%d op=", pos.Seq, pos.Segment, pos.Offset)
		if !strings.HasPrefix(line, prefix) {
			t.Errorf("line %d %q; want it to start %q", i, line, prefix)
		}
		if strings.Contains(line, `kind="noop"`) && strings.Contains(line, `payload="{\"i\":`) {
			enqueues++
		}
	}
	if enqueues != 5 {
		t.Errorf("dump shows %d enqueues with kind and payload; want 5\n%s", enqueues, out)
	}
}

// TestFormatRecordSpecExt checks that journal dump shows a spec's extension
// fields when they are set, and nothing of them when they are not.
func TestFormatRecordSpecExt(t *testing.T) {
	t.Parallel()
	sp := &state.Spec{Kind: "k", Queue: "bulk", Priority: -3, Schedule: "nightly", Tick: 1700000000000,
		Metadata: []state.Meta{{Key: "tenant", Value: "acme"}}}
	got := formatRecord(state.Encode(nil, &state.Op{Kind: state.OpEnqueue, ID: 1, At: 1, Spec: sp}))
	for _, want := range []string{` queue="bulk"`, ` priority=-3`, ` schedule="nightly" tick=2023-11-14T22:13:20.000Z`, ` metadata.tenant="acme"`} {
		if !strings.Contains(got, want) {
			t.Errorf("dump of an enqueue with extension fields: %q lacks %q", got, want)
		}
	}
	plain := formatRecord(state.Encode(nil, &state.Op{Kind: state.OpEnqueue, ID: 1, At: 1, Spec: &state.Spec{Kind: "k"}}))
	for _, no := range []string{"queue=", "priority=", "schedule=", "metadata."} {
		if strings.Contains(plain, no) {
			t.Errorf("dump of a plain enqueue %q shows %q", plain, no)
		}
	}
}
