package server

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBackupOutlastsTimeouts: a backup streams for longer than the
// server's read-header timeout (which also bounds a request's reads) and
// is not cut: the copy arrives whole, with its trailer.
func TestBackupOutlastsTimeouts(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", ReadHeaderTimeout: timeout, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	c := &Client{BaseURL: srv.URL()}
	if _, err := c.Enqueue(context.Background(), JobRequest{Kind: "http", URL: "http://127.0.0.1:9/x", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}); err != nil {
		t.Fatal(err)
	}
	dir := ""
	var names []string
	slow := true
	seq, err := c.Backup(context.Background(), func(d string) error { dir = d; return nil }, func(name string, size int64, r io.Reader) error {
		names = append(names, name)
		if slow {
			// The reader stalls mid-archive for longer than the timeout:
			// the server's writes block, its deadlines must not cut it.
			slow = false
			<-time.After(3 * timeout)
		}
		_, err := io.Copy(io.Discard, r)
		return err
	})
	if err != nil {
		t.Fatalf("backup: %v (files %v)", err, names)
	}
	if seq == 0 || dir == "" || len(names) == 0 {
		t.Fatalf("backup: seq %d, dir %q, files %v", seq, dir, names)
	}
	if !slicesHasSegment(names) {
		t.Fatalf("the archive holds no journal segment: %v", names)
	}
	// One at a time: a second backup while one streams is refused.
	resp, err := http.Get(srv.URL() + "/v1/backup")
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(resp.Body)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Backup(context.Background(), func(string) error { return nil }, func(string, int64, io.Reader) error { return nil })
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Errorf("a second backup while one runs: %v, want 409", err)
	}
	resp.Body.Close()
}

func slicesHasSegment(names []string) bool {
	for _, n := range names {
		if strings.HasSuffix(n, ".seg") {
			return true
		}
	}
	return false
}
