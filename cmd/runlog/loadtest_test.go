package main

import (
	"regexp"
	"strconv"
	"testing"
)

// TestLoadtest runs the hidden load test briefly against a fresh server, one
// job per request and in batches, and checks that every accepted job was
// delivered.
func TestLoadtest(t *testing.T) {
	t.Parallel()
	line := regexp.MustCompile(`enqueue: (\d+) jobs accepted[^\n]*errors 0\ndeliver: (\d+) jobs finished \(succeeded (\d+), failed 0\)[^\n]*the target saw (\d+) deliveries`)
	for _, batch := range []string{"1", "20"} {
		p := startServe(t, t.TempDir())
		code, out, errOut := runCLI(t, nil, "loadtest", "--server", p.url, "--conns", "4", "--duration", "300ms", "--delay", "100ms", "--batch", batch)
		if code != 0 {
			t.Fatalf("loadtest --batch %s: exit %d\n%s%s", batch, code, out, errOut)
		}
		m := line.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("loadtest --batch %s printed\n%s", batch, out)
		}
		accepted, _ := strconv.Atoi(m[1])
		if accepted == 0 || m[1] != m[2] || m[1] != m[3] || m[1] != m[4] {
			t.Errorf("loadtest --batch %s: accepted %s, finished %s, succeeded %s, delivered %s; want all equal and above 0", batch, m[1], m[2], m[3], m[4])
		}
		p.kill()
	}
}
