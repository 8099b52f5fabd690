package main

import (
	"bytes"
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
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// enqueueJobs opens dir with cfg, enqueues n jobs due in an hour and closes it.
func enqueueJobs(t *testing.T, dir string, cfg runlog.Config, n int) {
	t.Helper()
	cfg.Handlers = map[string]runlog.Handler{
		"noop": runlog.Handle(func(context.Context, json.RawMessage) error { return nil }),
	}
	r, err := runlog.Open(dir, cfg)
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
}

func globOne(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) == 0 {
		t.Fatalf("nothing matches %s (%v)", pattern, err)
	}
	sort.Strings(m)
	return m
}

func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	names, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range names {
		if e.Name() == "LOCK" {
			continue
		}
		if e.IsDir() {
			// The job table: copied whole, by the same rule.
			sub := copyDir(t, filepath.Join(from, e.Name()))
			if err := os.Rename(sub, filepath.Join(to, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// TestJournalVerifyAgreesWithOpen is issue 14 item 11: for each damage an
// operator or a disk can do to a data directory, `runlog journal verify`
// says corrupt (exit 3) exactly when opening the directory fails, and
// otherwise 0 (clean) or 2 (a torn tail that opening repairs).
func TestJournalVerifyAgreesWithOpen(t *testing.T) {
	t.Parallel()
	small := runlog.Config{SegmentSize: 4096}
	// Without a snapshot: several segments, all kept.
	bare := t.TempDir()
	enqueueJobs(t, bare, runlog.Config{SegmentSize: 4096, SnapshotBytes: -1}, 100)
	// With a snapshot: Close snapshots the first 30 jobs and drops their
	// segments; the next 30 go to segments after it, which the second
	// Close (snapshots off) keeps.
	snapped := t.TempDir()
	enqueueJobs(t, snapped, small, 30)
	enqueueJobs(t, snapped, runlog.Config{SegmentSize: 4096, SnapshotBytes: -1}, 100)
	if segs := globOne(t, filepath.Join(snapped, "*.seg")); len(segs) < 2 {
		t.Fatalf("want several segments after the snapshot, have %v", segs)
	}
	// Closed once: a snapshot of everything and one empty segment after it.
	closed := t.TempDir()
	enqueueJobs(t, closed, small, 30)
	if segs := globOne(t, filepath.Join(bare, "*.seg")); len(segs) < 2 {
		t.Fatalf("want several segments, have %v", segs)
	}

	flipAt := func(off int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			snap := globOne(t, filepath.Join(dir, "snap-*.snap"))[0]
			b, err := os.ReadFile(snap)
			if err != nil {
				t.Fatal(err)
			}
			b[off] = 0 // as `printf '\x00' | dd of=SNAP bs=1 seek=OFF conv=notrunc`
			if off != 60 {
				b[off] = 'X'
			}
			if err := os.WriteFile(snap, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name   string
		base   string
		damage func(t *testing.T, dir string)
		want   int
	}{
		{"clean", snapped, func(*testing.T, string) {}, exitOK},
		{"clean without snapshot", bare, func(*testing.T, string) {}, exitOK},
		{"torn tail", snapped, func(t *testing.T, dir string) {
			segs := globOne(t, filepath.Join(dir, "*.seg"))
			newest := segs[len(segs)-1]
			var end int64 = journal.HeaderSize
			if err := journal.Scan(nil, dir, journal.Options{}, func(pos journal.Position, rec []byte) error {
				if filepath.Base(newest) == fmt.Sprintf("%020d.seg", pos.Segment) {
					end = pos.Offset + journal.FrameHeaderSize + int64(len(rec)+7)&^7
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(newest, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			torn := make([]byte, journal.FrameHeaderSize+20)
			torn[0], torn[4], torn[5] = 100, 0xde, 0xad
			if _, err := f.WriteAt(torn, end); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, exitTorn},
		{"oldest segment deleted, no snapshot", bare, func(t *testing.T, dir string) {
			os.Remove(globOne(t, filepath.Join(dir, "*.seg"))[0])
		}, exitCorrupt},
		{"snapshot deleted", snapped, func(t *testing.T, dir string) {
			os.Remove(globOne(t, filepath.Join(dir, "snap-*.snap"))[0])
		}, exitCorrupt},
		{"snapshot byte 60 zeroed", snapped, flipAt(60), exitCorrupt},
		{"snapshot magic broken", snapped, flipAt(0), exitCorrupt},
		{"snapshot truncated", snapped, func(t *testing.T, dir string) {
			snap := globOne(t, filepath.Join(dir, "snap-*.snap"))[0]
			fi, err := os.Stat(snap)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(snap, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		}, exitCorrupt},
		{"segment after the snapshot deleted", snapped, func(t *testing.T, dir string) {
			os.Remove(globOne(t, filepath.Join(dir, "*.seg"))[0])
		}, exitCorrupt},
		// Item 12: acknowledged records lost from the newest segment in
		// ways its format alone reads as a clean end.
		{"newest segment cut at a record boundary", snapped, func(t *testing.T, dir string) {
			path, off := newestRecord(t, dir, 5)
			if err := os.Truncate(path, off); err != nil {
				t.Fatal(err)
			}
		}, exitCorrupt},
		{"newest records zeroed", snapped, func(t *testing.T, dir string) {
			path, off := newestRecord(t, dir, 5)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			clear(b[off:])
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, exitCorrupt},
		{"newest segment deleted", snapped, func(t *testing.T, dir string) {
			segs := globOne(t, filepath.Join(dir, "*.seg"))
			os.Remove(segs[len(segs)-1])
		}, exitCorrupt},
		{"the only segment after the snapshot deleted", closed, func(t *testing.T, dir string) {
			os.Remove(globOne(t, filepath.Join(dir, "*.seg"))[0])
		}, exitCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, tt.base)
			tt.damage(t, dir)
			var out, errOut bytes.Buffer
			code := runJournalVerify([]string{dir}, &out, &errOut)
			if code != tt.want {
				t.Errorf("verify: exit %d; want %d\n%s%s", code, tt.want, out.String(), errOut.String())
			}
			r, err := runlog.Open(dir, runlog.Config{SegmentSize: 4096})
			if err == nil {
				r.Close(context.Background())
			}
			if opened := err == nil; opened != (code == exitOK || code == exitTorn) {
				t.Errorf("verify exit %d, but Open: %v", code, err)
			}
			if code == exitCorrupt && !strings.Contains(out.String(), "restore") {
				t.Errorf("verify does not say what to do:\n%s", out.String())
			}
			if tt.want == exitCorrupt {
				t.Logf("verify: %s", out.String())
			}
		})
	}
}

// newestRecord returns the newest segment of dir and the offset of its
// k-th record from the end.
func newestRecord(t *testing.T, dir string, k int) (string, int64) {
	t.Helper()
	segs := globOne(t, filepath.Join(dir, "*.seg"))
	newest := segs[len(segs)-1]
	var offs []int64
	if err := journal.Scan(nil, dir, journal.Options{}, func(pos journal.Position, rec []byte) error {
		if fmt.Sprintf("%020d.seg", pos.Segment) == filepath.Base(newest) {
			offs = append(offs, pos.Offset)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(offs) < k {
		t.Fatalf("the newest segment holds %d records; want %d at least", len(offs), k)
	}
	return newest, offs[len(offs)-k]
}

// TestServeZeroedRecordsAfterKill is issue 14 item 12 through the server:
// jobs enqueued and cancelled, the server killed, then the newest segment's
// records zeroed (what a disk or an operator, never a crash, does).
// Once the marker names them (within a second of the appends), verify
// says corrupt and opening the directory refuses, naming the file.
func TestServeZeroedRecordsAfterKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir)
	c := p.client()
	ctx := context.Background()
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	var ids []uint64
	for i := range 70 {
		created, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: "http://127.0.0.1:9/x", Key: fmt.Sprintf("z-%d", i), RunAt: later})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.ID)
	}
	for _, id := range ids[:5] {
		if _, err := c.Cancel(ctx, id, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// zeroNewest zeroes every record of the newest segment of d and
	// returns that file.
	zeroNewest := func(d string) string {
		path, _ := newestRecord(t, d, 1)
		var first int64 = -1
		if err := journal.Scan(nil, d, journal.Options{}, func(pos journal.Position, rec []byte) error {
			if fmt.Sprintf("%020d.seg", pos.Segment) == filepath.Base(path) && first < 0 {
				first = pos.Offset
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		clear(b[first:])
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// Wait until the marker names the records: each time the marker file
	// changes (the event), check the property itself on a copy.
	var lastMark []byte
	testwait.Until(t, "verify to detect the zeroed records (after the marker names them)", func() (string, bool) {
		mark, err := os.ReadFile(filepath.Join(dir, "MARK"))
		if err != nil || bytes.Equal(mark, lastMark) {
			return "the marker has not changed", false
		}
		lastMark = mark
		cp := copyDir(t, dir)
		zeroNewest(cp)
		var out, errOut bytes.Buffer
		code := runJournalVerify([]string{cp}, &out, &errOut)
		return out.String() + errOut.String(), code == exitCorrupt
	})
	p.kill()
	path := zeroNewest(dir)
	code, out, errOut := runCLI(t, nil, "journal", "verify", dir)
	if code != exitCorrupt || !strings.Contains(out, "file: "+path) || !strings.Contains(out, "MARK") {
		t.Fatalf("verify after zeroing: exit %d; want %d naming %s\n%s%s", code, exitCorrupt, path, out, errOut)
	}
	r, err := runlog.Open(dir, runlog.Config{})
	if err == nil {
		r.Close(ctx)
		t.Fatal("Open accepted a directory whose acknowledged records were zeroed")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "runlog journal verify "+dir) {
		t.Fatalf("Open's refusal does not name the file and the verify command: %v", err)
	}
}
