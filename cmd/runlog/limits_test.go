package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/server"
)

// TestCLILimit: serve's --rate-limit and --rate-limit-default set limits,
// "runlog limit set" sets and removes one at run time, "runlog targets"
// shows them, and a limit set at run time survives a restart.
func TestCLILimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	flags := []string{"--rate-limit", "http://a.example=5/2", "--rate-limit-default", "1000"}
	p := startServe(t, dir, flags...)
	env := []string{"RUNLOG_SERVER=" + p.url}
	code, out, errOut := runCLI(t, env, "limit", "set", "http://127.0.0.1:9000", "--rate", "100", "--burst", "10")
	if code != 0 || out != "http://127.0.0.1:9000: 100 attempts per second, bursts of 10\n" {
		t.Fatalf("limit set: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, env, "limit", "set", "http://127.0.0.1:9000", "--rate", "-3")
	if code != exitFailure || !strings.Contains(errOut, "between 0.001 and 1000000") {
		t.Errorf("limit set --rate -3: exit %d, %q; want the server's 400 with what to fix", code, errOut)
	}
	want := map[string]server.Limit{"http://127.0.0.1:9000": {Rate: 100, Burst: 10}, "http://a.example": {Rate: 5, Burst: 2}}
	check := func(when string) {
		t.Helper()
		code, out, errOut := runCLI(t, env, "targets", "-o", "json")
		var list server.TargetList
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("%s: targets -o json: exit %d, %q %q", when, code, out, errOut)
		}
		got := map[string]server.Limit{}
		for _, tg := range list.Targets {
			if tg.Limit != nil {
				got[tg.Target] = *tg.Limit
			}
		}
		for target, l := range want {
			if got[target] != l {
				t.Errorf("%s: targets shows %s limited by %+v, want %+v (all: %+v)", when, target, got[target], l, got)
			}
		}
		code, out, _ = runCLI(t, env, "targets")
		if code != 0 || !strings.Contains(out, "RATE LIMIT") || !strings.Contains(out, "100/s burst 10") {
			t.Errorf("%s: targets table: exit %d, %q", when, code, out)
		}
	}
	check("before a restart")
	p.kill()
	p = startServe(t, dir, flags...)
	env = []string{"RUNLOG_SERVER=" + p.url}
	check("after a restart")
	code, out, errOut = runCLI(t, env, "limit", "set", "http://127.0.0.1:9000", "--rate", "0")
	if code != 0 || out != "http://127.0.0.1:9000: no rate limit\n" {
		t.Fatalf("limit set --rate 0: exit %d, %q %q", code, out, errOut)
	}
}
