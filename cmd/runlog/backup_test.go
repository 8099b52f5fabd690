package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// TestBackupLiveServer backs up the directory of a real server process
// while jobs flow into it, then SIGKILLs the server and opens the copy with
// another server: every job acknowledged before the backup began is in the
// copy, the finished ones in the state they had, and runlog journal verify
// passes on the copy. A backup into a non-empty directory is refused; a
// backup of the directory once no server holds it works too, and restore
// brings it back into a new directory (and refuses a non-empty one).
func TestBackupLiveServer(t *testing.T) {
	t.Parallel()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/fail") {
			http.Error(w, "no such thing", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer target.Close()
	const token = "backup-test-token-0123456789"
	env := []string{"RUNLOG_TOKEN=" + token}
	dir := t.TempDir()
	// Small snapshots, so that snapshots and segment drops happen during the test.
	p := startServe(t, dir, "--token", token, "--retry-attempts", "1")
	c := p.client()
	c.Token = token
	ctx := context.Background()

	// Jobs that end (succeeded, failed) and jobs that stay pending.
	type seen struct{ state runlog.State }
	before := map[uint64]seen{}
	var finishing []uint64
	for i := range 300 {
		req := server.JobRequest{Kind: "http", URL: target.URL + "/ok", Key: fmt.Sprintf("a-%d", i), Body: strings.Repeat("b", 200)}
		switch i % 3 {
		case 1:
			req.URL = target.URL + "/fail"
		case 2:
			req.RunAt = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		}
		created, err := c.Enqueue(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 2 {
			finishing = append(finishing, created.ID)
		}
		before[created.ID] = seen{}
	}
	for _, id := range finishing {
		testwait.For(t, fmt.Sprintf("job %d to finish", id), func() bool {
			j, err := c.Job(ctx, id)
			return err == nil && (j.State == "succeeded" || j.State == "failed")
		})
	}
	for id := range before {
		j, err := c.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		before[id] = seen{state: j.State}
	}

	// Jobs go on flowing during the backup.
	var (
		mu    sync.Mutex
		acked []uint64
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				created, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: target.URL + "/ok", Body: fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)})
				if err != nil {
					var apiErr *server.APIError
					if errors.As(err, &apiErr) {
						t.Errorf("enqueue answered %v", err)
					}
					return // the server is gone
				}
				mu.Lock()
				acked = append(acked, created.ID)
				mu.Unlock()
			}
		}()
	}
	testwait.For(t, "enqueues to flow", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 100 })

	// A DEST that holds anything is refused, and left alone.
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep"), []byte("mine"), 0o600)
	if code, out, errOut := runCLI(t, env, "backup", "--server", p.url, dir, full); code != exitFailure || !strings.Contains(errOut, "not empty") {
		t.Fatalf("backup into a non-empty directory: exit %d\n%s%s", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(full, "keep")); err != nil || string(b) != "mine" {
		t.Fatalf("the non-empty DEST was changed: %q %v", b, err)
	}
	// A wrong token is refused, with what to do.
	if code, _, errOut := runCLI(t, []string{"RUNLOG_TOKEN=wrong"}, "backup", "--server", p.url, dir, filepath.Join(t.TempDir(), "x")); code != exitFailure || !strings.Contains(errOut, "refused the token") {
		t.Fatalf("backup with a wrong token: exit %d\n%s", code, errOut)
	}

	mu.Lock()
	ackedBefore := append([]uint64(nil), acked...)
	mu.Unlock()
	dest := filepath.Join(t.TempDir(), "copy")
	code, out, errOut := runCLI(t, env, "backup", "--server", p.url, dir, dest)
	if code != exitOK {
		t.Fatalf("backup of a live server: exit %d\n%s%s\n%s", code, out, errOut, p.output())
	}
	if !strings.Contains(out, "by the server at") {
		t.Fatalf("backup did not go through the server holding the directory:\n%s", out)
	}
	p.kill()
	close(stop)
	wg.Wait()

	if code, out, errOut := runCLI(t, nil, "journal", "verify", dest); code != exitOK {
		t.Fatalf("journal verify of the copy: exit %d\n%s%s", code, out, errOut)
	}
	q := startServe(t, dest, "--token", token, "--retry-attempts", "1")
	qc := q.client()
	qc.Token = token
	for id, s := range before {
		j, err := qc.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %d, acknowledged before the backup, is not in the copy: %v", id, err)
		}
		if j.State != s.state {
			t.Errorf("job %d is %s in the copy, was %s before the backup", id, j.State, s.state)
		}
	}
	for _, id := range ackedBefore {
		if _, err := qc.Job(ctx, id); err != nil {
			t.Fatalf("job %d, acknowledged before the backup, is not in the copy: %v", id, err)
		}
	}
	t.Logf("%d jobs checked in the copy (%d enqueued while the backup began)", len(before)+len(ackedBefore), len(ackedBefore))
	if code := q.stop(t); code != 0 {
		t.Fatalf("stop of the server on the copy: exit %d\n%s", code, q.output())
	}

	// No server holds dir now (it was killed): the CLI copies it itself.
	dest2 := filepath.Join(t.TempDir(), "copy2")
	code, out, errOut = runCLI(t, nil, "backup", dir, dest2)
	if code != exitOK || !strings.Contains(out, "directly") {
		t.Fatalf("backup of a directory no server holds: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, nil, "journal", "verify", dest2); code != exitOK {
		t.Fatalf("journal verify of the offline copy: exit %d\n%s%s", code, out, errOut)
	}
	// Restore refuses a non-empty directory, and fills an empty one.
	if code, _, errOut := runCLI(t, nil, "restore", dest2, full); code != exitFailure || !strings.Contains(errOut, "not empty") {
		t.Fatalf("restore into a non-empty directory: exit %d\n%s", code, errOut)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if code, out, errOut := runCLI(t, nil, "restore", dest2, restored); code != exitOK {
		t.Fatalf("restore: exit %d\n%s%s", code, out, errOut)
	}
	// A damaged backup is refused, and nothing is restored.
	snaps, _ := filepath.Glob(filepath.Join(dest2, "snap-*.snap"))
	if len(snaps) == 0 {
		t.Fatalf("the offline copy holds no snapshot")
	}
	b, err := os.ReadFile(snaps[len(snaps)-1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(snaps[len(snaps)-1], b, 0o600); err != nil {
		t.Fatal(err)
	}
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	if code, _, errOut := runCLI(t, nil, "restore", dest2, nowhere); code != exitCorrupt || !strings.Contains(errOut, "does not verify") {
		t.Fatalf("restore of a damaged backup: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(nowhere); !os.IsNotExist(err) {
		t.Fatalf("a refused restore created %s", nowhere)
	}
	r := startServe(t, restored, "--token", token)
	rc := r.client()
	rc.Token = token
	for id, s := range before {
		j, err := rc.Job(ctx, id)
		if err != nil || j.State != s.state {
			t.Fatalf("job %d in the restored directory: %+v %v, want state %s", id, j.State, err, s.state)
		}
	}
}

// TestBackupUsage: bad arguments are refused before anything is written.
func TestBackupUsage(t *testing.T) {
	t.Parallel()
	if code, _, errOut := runCLI(t, nil, "backup", t.TempDir()); code != exitUsage || !strings.Contains(errOut, "missing DEST") {
		t.Fatalf("backup DIR: exit %d\n%s", code, errOut)
	}
	empty := t.TempDir()
	dest := filepath.Join(t.TempDir(), "d")
	if code, _, errOut := runCLI(t, nil, "backup", empty, dest); code != exitFailure || !strings.Contains(errOut, "not a runlog data directory") {
		t.Fatalf("backup of a directory without a journal: exit %d\n%s", code, errOut)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("a refused backup created %s", dest)
	}
	if code, _, errOut := runCLI(t, nil, "restore", empty, dest); code != exitFailure || !strings.Contains(errOut, "not a runlog data directory") {
		t.Fatalf("restore of a directory without a journal: exit %d\n%s", code, errOut)
	}
}
