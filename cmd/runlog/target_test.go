package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// TestCLITargetEnable: a receiver that answers 410 is disabled (runlog
// targets shows it with its reason), runlog target enable enables it and
// its held job is delivered; a second enable fails saying why; a bad
// --disable-after is refused.
func TestCLITargetEnable(t *testing.T) {
	t.Parallel()
	var gone atomic.Bool
	gone.Store(true)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gone.Load() {
			w.WriteHeader(http.StatusGone)
		}
	}))
	defer recv.Close()
	p := startServe(t, t.TempDir(), "--disable-after", "48h")
	env := []string{"RUNLOG_SERVER=" + p.url}
	enqueue := func() uint64 {
		t.Helper()
		code, out, errOut := runCLI(t, env, "enqueue", "--url", recv.URL+"/hook", "-o", "json")
		var created server.Created
		if code != 0 || json.Unmarshal([]byte(out), &created) != nil {
			t.Fatalf("enqueue: exit %d, %q %q", code, out, errOut)
		}
		return created.ID
	}
	ctx := context.Background()
	first := enqueue()
	testwait.For(t, "the 410 job failed", func() bool {
		j, err := p.client().Job(ctx, first)
		return err == nil && j.State == runlog.StateFailed
	})
	held := enqueue()
	code, out, errOut := runCLI(t, env, "targets")
	if code != 0 || !strings.Contains(out, "LIFECYCLE") || !strings.Contains(out, "disabled since") || !strings.Contains(out, "410") {
		t.Fatalf("targets: exit %d, %q %q", code, out, errOut)
	}
	gone.Store(false)
	code, out, errOut = runCLI(t, env, "target", "enable", recv.URL)
	if code != 0 || !strings.Contains(out, "enabled") || strings.Contains(out, "disabled") {
		t.Fatalf("target enable: exit %d, %q %q", code, out, errOut)
	}
	testwait.For(t, "the held job delivered", func() bool {
		j, err := p.client().Job(ctx, held)
		return err == nil && j.State == runlog.StateSucceeded
	})
	for _, tc := range []struct {
		args   []string
		code   int
		reason string
	}{
		{[]string{"target", "enable", recv.URL}, exitFailure, "not disabled"},
		{[]string{"target"}, exitUsage, "say what to do"},
		{[]string{"target", "disable", "x"}, exitUsage, "say what to do"},
		{[]string{"target", "enable"}, exitUsage, "missing TARGET"},
		{[]string{"serve", "--data", t.TempDir(), "--disable-after", "-1h"}, exitUsage, "--disable-after"},
	} {
		code, _, errOut := runCLI(t, env, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.reason) {
			t.Errorf("runlog %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.reason)
		}
	}
}
