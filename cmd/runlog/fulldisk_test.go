package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// loopMount makes a size-byte ext4 (no blocks reserved for root, so that
// the free space is the same for every process) in a file, loop-mounts it
// and returns the mount point; the mount is removed at the end of the test.
// It skips the test where that cannot be done: not root, no mkfs.ext4 or
// mount, or a container that refuses loop devices.
func loopMount(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it loop-mounts a small ext4 to fill a real disk")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s to loop-mount a small ext4: %v", tool, err)
		}
	}
	base := t.TempDir()
	img, mnt := filepath.Join(base, "disk.img"), filepath.Join(base, "mnt")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot loop-mount an ext4 here (a container without loop devices?): %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}

// freeBytes returns the bytes an unprivileged process may still write on
// the filesystem of path.
func freeBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// fillDisk writes the file name until about leave bytes are free on its
// filesystem (0: until it is full), syncs it and returns its size.
func fillDisk(t *testing.T, name string, leave int64) int64 {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		free := freeBytes(t, filepath.Dir(name))
		if free <= leave {
			break
		}
		n := min(int64(len(chunk)), free-leave)
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatal(err)
		}
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// health returns the status and decoded body of GET /healthz.
func health(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out map[string]string
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("/healthz body %q: %v", body, err)
	}
	return resp.StatusCode, out
}

// TestServeFullDisk (issue 14 items 8 and 9) runs `runlog serve` on a
// 64 MiB ext4 that a filler file leaves with less room than the next 16 MiB
// segment: the server must use the active segment's room and the free
// space after it, turn /healthz to 503 once the journal fails, keep every
// acknowledged job once space is freed and it is restarted, and stop with
// exit 0 when the disk is full but nothing is at risk.
func TestServeFullDisk(t *testing.T) {
	t.Parallel()
	mnt := loopMount(t, 64<<20)
	dir := filepath.Join(mnt, "data")
	filler := filepath.Join(mnt, "filler")
	ctx := context.Background()

	// A disk full but for the active (preallocated) segment's room: jobs
	// still go in, and a clean stop exits 0 without a new segment.
	p := startServe(t, dir, "--shutdown-timeout", "5s")
	fillDisk(t, filler, 0)
	first, err := p.client().Enqueue(ctx, server.JobRequest{Kind: "http", URL: "http://127.0.0.1:9/x", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatalf("enqueue with the active segment's room left: %v\n%s", err, p.output())
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d on SIGTERM with a full disk and the active segment's room left; want 0\n%s", code, p.output())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	p = startServe(t, dir, "--shutdown-timeout", "5s")
	if _, err := p.client().Job(ctx, first.ID); err != nil {
		t.Fatalf("job %d lost: %v", first.ID, err)
	}
	const leave = 8 << 20
	fillDisk(t, filler, leave)

	// Jobs due in a year, with 32 KiB bodies, 16 a batch, until refused.
	body := strings.Repeat("b", 32<<10)
	runAt := time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339)
	batch := make([]server.JobRequest, 16)
	for i := range batch {
		batch[i] = server.JobRequest{Kind: "http", URL: "http://127.0.0.1:9/x", Body: body, RunAt: runAt}
	}
	var acked []uint64
	var refusal error
	for len(acked) < 10000 {
		res, err := p.client().EnqueueBatch(ctx, batch)
		if err != nil {
			refusal = err
			break
		}
		for _, c := range res.Jobs {
			acked = append(acked, c.ID)
		}
	}
	var apiErr *server.APIError
	if !errors.As(refusal, &apiErr) || apiErr.Status != http.StatusInternalServerError {
		t.Fatalf("after %d jobs the enqueue failed with %v; want a 500 from a full disk\n%s", len(acked), refusal, p.output())
	}
	t.Logf("the journal failed after %d jobs (%d MiB of bodies)", len(acked), len(acked)*len(body)>>20)
	// The 16 MiB active segment and most of the 8 MiB left beside it.
	if got, want := int64(len(acked))*int64(len(body)), int64(16<<20+leave/2); got < want {
		t.Errorf("the journal failed after %d jobs (%d body bytes); want at least %d bytes: the room beside the active segment went unused\n%s", len(acked), got, want, p.output())
	}
	code, h := health(t, p.url)
	if code != http.StatusServiceUnavailable || h["status"] != "failed" || !strings.Contains(h["error"], "no space left on device") {
		t.Errorf("/healthz after the journal failed = %d %v; want 503 status failed with the cause", code, h)
	}
	if !strings.Contains(p.output(), "preallocate") {
		t.Errorf("no warning that the next segment could not be preallocated\n%s", p.output())
	}
	if code := p.stop(t); code != 1 {
		t.Errorf("exit %d on SIGTERM after the journal failed; want 1\n%s", code, p.output())
	}

	// The operator frees space and restarts: every acknowledged job is there.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, dir, "--shutdown-timeout", "5s")
	for _, id := range acked {
		if _, err := p.client().Job(ctx, id); err != nil {
			t.Fatalf("acknowledged job %d lost after the restart: %v", id, err)
		}
	}
	if code, h := health(t, p.url); code != http.StatusOK {
		t.Fatalf("/healthz after the restart = %d %v", code, h)
	}
	more, err := p.client().EnqueueBatch(ctx, batch[:4])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range more.Jobs {
		acked = append(acked, c.ID)
	}

	// A disk full to the last block: a clean stop must still exit 0 (the
	// final snapshot cannot be written, and need not be).
	fillDisk(t, filler, 0)
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d on SIGTERM on a full disk with nothing at risk; want 0\n%s", code, p.output())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	p = startServe(t, dir, "--shutdown-timeout", "5s")
	for _, id := range acked {
		if _, err := p.client().Job(ctx, id); err != nil {
			t.Fatalf("acknowledged job %d lost after the stop on a full disk: %v", id, err)
		}
	}
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d on SIGTERM with room; want 0\n%s", code, p.output())
	}
	var buf bytes.Buffer
	if code := runJournal([]string{"verify", dir}, &buf, &buf); code != exitOK {
		t.Errorf("journal verify after it all: exit %d\n%s", code, buf.String())
	}
}
