package server

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestDiskFreeGauge (issue 14 item 9): the server's /metrics carries the
// free space of the data directory's filesystem, as statfs reports it.
func TestDiskFreeGauge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := Start(Config{Dir: dir, Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(t.Context())
	resp, err := http.Get(srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got float64 = -1
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "runlog_journal_disk_free_bytes "); ok {
			if got, err = strconv.ParseFloat(v, 64); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	want := float64(st.Bavail) * float64(st.Bsize)
	// Other tests write to the same filesystem meanwhile: within 1 GiB.
	if got < 0 || got > want+(1<<30) || got < want-(1<<30) {
		t.Fatalf("runlog_journal_disk_free_bytes = %v; want about %v (statfs)\n%s", got, want, body)
	}
}

// TestDiskWarner: below the mark it warns once, again only when the free
// space has halved, and says so once it is back above.
func TestDiskWarner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	free, err := diskFree(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	w := diskWarner{dir: dir, below: free * 4, log: slog.New(slog.NewTextHandler(&logs, nil))}
	w.check()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "free disk space now") {
		t.Fatalf("no warning below the mark: %q", logs.String())
	}
	logs.Reset()
	w.check()
	if logs.Len() != 0 {
		t.Fatalf("warned again without the free space halving: %q", logs.String())
	}
	w.warned = free * 3 // as if the last warning saw three times as much
	w.check()
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("no warning after the free space halved: %q", logs.String())
	}
	logs.Reset()
	w.below = 1
	w.check()
	if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "room again") {
		t.Fatalf("no all-clear once above the mark: %q", logs.String())
	}
}
