package main

import (
	"regexp"
	"strconv"
	"testing"
)

// TestLoadtest runs the hidden load test briefly against a fresh server, one
// job per request and in batches, with each no-op target, and checks that
// every accepted job was delivered and that the CPU time per job of both
// processes is reported.
func TestLoadtest(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`enqueue: (\d+) jobs accepted[^\n]*errors 0\nenqueue cpu: server [0-9.]+ µs \+ loadtest [0-9.]+ µs[^\n]*\ndeliver: (\d+) jobs finished \(succeeded (\d+), failed 0\)[^\n]*the target saw (\d+) deliveries[^\n]*\ndeliver cpu: server [0-9.]+ µs \+ loadtest [0-9.]+ µs = [0-9.]+ µs per job`)
	for _, tc := range []struct{ batch, receiver string }{{"1", receiverLean}, {"20", receiverLean}, {"20", receiverNetHTTP}} {
		batch := tc.batch
		p := startServe(t, t.TempDir())
		code, out, errOut := runCLI(t, nil, "loadtest", "--server", p.url, "--conns", "4", "--duration", "300ms", "--delay", "100ms", "--batch", batch,
			"--receiver", tc.receiver, "--server-pid", strconv.Itoa(p.cmd.Process.Pid))
		if code != 0 {
			t.Fatalf("loadtest --batch %s: exit %d\n%s%s", batch, code, out, errOut)
		}
		m := line.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("loadtest --batch %s printed\n%s", batch, out)
		}
		accepted, _ := strconv.Atoi(m[1])
		if accepted == 0 || m[1] != m[2] || m[1] != m[3] || m[1] != m[4] {
			t.Errorf("loadtest --batch %s --receiver %s: accepted %s, finished %s, succeeded %s, delivered %s; want all equal and above 0", batch, tc.receiver, m[1], m[2], m[3], m[4])
		}
		p.kill()
	}
}
