package server

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog"
)

// BackupContentType is the media type of GET /v1/backup's answer: a tar
// archive of the copy's files.
const BackupContentType = "application/x-tar"

// Headers of GET /v1/backup: the server's data directory (so that runlog
// backup DIR can check it talks to the server of DIR), and, as a trailer
// after the archive, the last journal record the copy holds.
const (
	HeaderDataDir    = "Runlog-Data-Dir"
	TrailerBackupSeq = "Runlog-Backup-Seq"
)

// backup streams a consistent copy of the data directory as a tar archive
// (Runner.Backup). An error before the first byte is answered in JSON;
// after it, the connection is cut, so the client's archive ends short
// (tar reports an unexpected EOF) and is never taken for a whole copy.
func (a *API) backup(w http.ResponseWriter, r *http.Request) {
	// A copy of gigabytes takes longer than the server's write timeout
	// (and its read timeout, which also bounds the request).
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	var tw *tar.Writer
	start := func() {
		h := w.Header()
		h.Set("Content-Type", BackupContentType)
		h.Set("Cache-Control", "no-store")
		h.Set("Trailer", TrailerBackupSeq)
		if a.cfg.DataDir != "" {
			h.Set(HeaderDataDir, a.cfg.DataDir)
		}
		w.WriteHeader(http.StatusOK)
		tw = tar.NewWriter(w)
	}
	now := time.Now()
	seq, err := a.runner.Backup(r.Context(), func(name string, size int64, rd io.Reader) error {
		if tw == nil {
			start()
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o600, ModTime: now, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.Copy(tw, rd)
		return err
	})
	switch {
	case err != nil && tw == nil:
		status := http.StatusInternalServerError
		switch {
		case errors.Is(err, runlog.ErrClosed):
			status = http.StatusServiceUnavailable
		case errors.Is(err, runlog.ErrNoBackup):
			status = http.StatusNotImplemented
		case errors.Is(err, runlog.ErrBackupRunning):
			status = http.StatusConflict
			w.Header().Set("Retry-After", "10")
		}
		writeError(w, status, "backup failed: "+err.Error())
		return
	case err != nil:
		a.cfg.Logger.Error("backup failed while streaming; the client's copy is cut short", "err", err)
		panic(http.ErrAbortHandler)
	}
	if tw == nil {
		start()
	}
	if err := tw.Close(); err != nil {
		panic(http.ErrAbortHandler)
	}
	w.Header().Set(TrailerBackupSeq, strconv.FormatUint(seq, 10))
}

// Backup asks the server for a copy of its data directory (GET
// /v1/backup). check is called with the server's data directory before
// any file; an error from it ends the backup. emit is called for each file
// of the archive (names as the server sent them: the caller checks them).
// It returns the last journal record the copy holds, once the archive
// ended whole; an archive cut short is an error. The client's HTTP timeout
// applies to the whole copy: give a client without one for large copies.
func (c *Client) Backup(ctx context.Context, check func(dataDir string) error, emit func(name string, size int64, r io.Reader) error) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.BaseURL, "/")+"/v1/backup", nil)
	if err != nil {
		return 0, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return 0, &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := check(resp.Header.Get(HeaderDataDir)); err != nil {
		return 0, err
	}
	tr := tar.NewReader(resp.Body)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("the backup's archive ended short or is damaged (the server cut it, or the connection broke): %w", err)
		}
		if h.Typeflag != tar.TypeReg {
			return 0, fmt.Errorf("the backup's archive holds %q of type %q, not a regular file: refused", h.Name, h.Typeflag)
		}
		if err := emit(h.Name, h.Size, tr); err != nil {
			return 0, err
		}
	}
	// The trailer comes after the body's end.
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, fmt.Errorf("the backup's answer ended short: %w", err)
	}
	seq, err := strconv.ParseUint(resp.Trailer.Get(TrailerBackupSeq), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the server did not confirm the end of the backup (trailer %s missing: it failed after the archive): %w", TrailerBackupSeq, err)
	}
	return seq, nil
}
