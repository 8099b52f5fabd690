package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/server"
)

// TestCLIQueueLimit: serve's --queue-rate-limit sets a queue's limit at
// start, "runlog limit set --queue" sets and removes one at run time (and
// refuses a target and a queue at once), "runlog queues" shows them, a
// limit set at run time survives a restart, and "runlog limit set TARGET"
// still sets a target's.
func TestCLIQueueLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startServe(t, dir, "--queue-rate-limit", "bulk=5/2")
	env := []string{"RUNLOG_SERVER=" + p.url}
	code, out, errOut := runCLI(t, env, "limit", "set", "--queue", "mail", "--rate", "100", "--burst", "10")
	if code != 0 || out != "queue mail: 100 attempts per second, bursts of 10\n" {
		t.Fatalf("limit set --queue: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, env, "limit", "set", "--queue", "mail", "--rate", "-3")
	if code != exitFailure || !strings.Contains(errOut, "between 0.001 and 1000000") {
		t.Errorf("limit set --queue --rate -3: exit %d, %q; want the server's 400 with what to fix", code, errOut)
	}
	code, _, errOut = runCLI(t, env, "limit", "set", "http://x.example", "--queue", "mail", "--rate", "1")
	if code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("limit set TARGET --queue: exit %d, %q; want a usage error", code, errOut)
	}
	code, _, errOut = runCLI(t, env, "limit", "set", "--rate", "1")
	if code != exitUsage || !strings.Contains(errOut, "missing TARGET (or --queue NAME") {
		t.Errorf("limit set without TARGET: exit %d, %q; want a usage error", code, errOut)
	}
	if code, out, errOut = runCLI(t, env, "limit", "set", "http://127.0.0.1:9000", "--rate", "3"); code != 0 || out != "http://127.0.0.1:9000: 3 attempts per second, bursts of 1\n" {
		t.Errorf("limit set TARGET: exit %d, %q %q", code, out, errOut)
	}
	check := func(when string) {
		t.Helper()
		code, out, errOut := runCLI(t, env, "queues", "-o", "json")
		var list server.QueueList
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("%s: queues -o json: exit %d, %q %q", when, code, out, errOut)
		}
		got := map[string][2]float64{}
		for _, q := range list.Queues {
			got[q.Name] = [2]float64{q.Rate, float64(q.Burst)}
		}
		if got["mail"] != [2]float64{100, 10} || got["bulk"] != [2]float64{5, 2} {
			t.Errorf("%s: queues shows limits %v; want mail 100/10 and bulk 5/2", when, got)
		}
		code, out, _ = runCLI(t, env, "queues")
		if code != 0 || !strings.Contains(out, "RATE LIMIT") || !strings.Contains(out, "100/s burst 10 (10 tokens)") {
			t.Errorf("%s: queues table: exit %d, %q", when, code, out)
		}
	}
	check("before a restart")
	p.kill()
	p = startServe(t, dir, "--queue-rate-limit", "bulk=5/2")
	env = []string{"RUNLOG_SERVER=" + p.url}
	check("after a restart")
	code, out, errOut = runCLI(t, env, "limit", "set", "--queue", "mail", "--rate", "0")
	if code != 0 || out != "queue mail: no rate limit\n" {
		t.Fatalf("limit set --queue --rate 0: exit %d, %q %q", code, out, errOut)
	}
}

// TestQueueLimitFlag: --queue-rate-limit refuses what the runner would.
func TestQueueLimitFlag(t *testing.T) {
	t.Parallel()
	for in, says := range map[string]string{
		"mail":        "want NAME=RATE",
		"=5":          "want NAME=RATE",
		"a b=5":       "not a letter",
		"mail=0":      "between 0.001",
		"mail=5/0":    "burst",
		"default=5/x": "burst",
	} {
		var f queueLimitFlag
		if err := f.Set(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("Set(%q) = %v; want an error saying %q", in, err, says)
		}
	}
	var f queueLimitFlag
	if err := f.Set("default=5/3"); err != nil || f["default"].Rate != 5 || f["default"].Burst != 3 {
		t.Fatalf("Set(default=5/3) = %v, %v", err, f)
	}
	if err := f.Set("default=1"); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("a second limit of one queue: %v", err)
	}
}
