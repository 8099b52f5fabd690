package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// TestCLIQueues: runlog queues, runlog queue pause|resume|set and the
// enqueue flags --queue and --priority, against a server.
func TestCLIQueues(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	env := []string{"RUNLOG_SERVER=" + p.url}
	later := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	code, out, errOut := runCLI(t, env, "enqueue", "--url", "http://127.0.0.1:9/x", "--run-at", later, "--queue", "mail", "--priority", "3", "-o", "json")
	var created server.Created
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("enqueue --queue --priority: exit %d, %q %q", code, out, errOut)
	}
	j, err := p.client().Job(context.Background(), created.ID)
	if err != nil || j.Queue != "mail" || j.Priority != 3 {
		t.Fatalf("the job: %+v %v", j, err)
	}
	if code, out, errOut = runCLI(t, env, "queue", "pause", "mail"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("queue pause mail: exit %d, %q %q", code, out, errOut)
	}
	if code, out, errOut = runCLI(t, env, "queue", "set", "mail", "--concurrency", "2"); code != 0 || !strings.Contains(out, "mail") {
		t.Fatalf("queue set: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "queues", "-o", "json")
	var list server.QueueList
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("queues -o json: exit %d, %q %q", code, out, errOut)
	}
	found := false
	for _, q := range list.Queues {
		if q.Name == "mail" {
			found = q.Paused && q.Concurrency == 2 && q.Counts.Pending == 1
		}
	}
	if !found {
		t.Fatalf("queues: %+v, want mail paused, concurrency 2, 1 pending", list)
	}
	if code, out, _ = runCLI(t, env, "queues"); code != 0 || !strings.Contains(out, "QUEUE") || !strings.Contains(out, "default") {
		t.Errorf("queues table: exit %d, %q", code, out)
	}
	if code, out, errOut = runCLI(t, env, "queue", "resume", "mail"); code != 0 || strings.Contains(out, "paused") {
		t.Fatalf("queue resume mail: exit %d, %q %q", code, out, errOut)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		reason string
	}{
		{[]string{"queue"}, exitUsage, "say what to do"},
		{[]string{"queue", "stop", "mail"}, exitUsage, "say what to do"},
		{[]string{"queue", "pause"}, exitUsage, "missing NAME"},
		{[]string{"queue", "set", "mail"}, exitUsage, "--concurrency N is required"},
		{[]string{"queue", "pause", "a b"}, exitFailure, "HTTP 400"},
		{[]string{"enqueue", "--url", "http://127.0.0.1:9/x", "--priority", "5000"}, exitFailure, "priority 5000"},
	} {
		code, _, errOut := runCLI(t, env, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.reason) {
			t.Errorf("runlog %s: exit %d, %q; want %d and %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.reason)
		}
	}
}
