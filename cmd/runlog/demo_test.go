package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo runs `runlog demo` with fewer jobs: it must exit 0 with a summary
// in which every job is accounted for, the healthy target's jobs succeed and
// the down target's fail.
func TestDemo(t *testing.T) {
	t.Parallel()
	code, out, errOut := runCLI(t, nil, "demo", "--jobs", "300")
	if code != 0 {
		t.Fatalf("runlog demo: exit %d\n%s\n%s", code, out, errOut)
	}
	num := func(label string) int {
		m := regexp.MustCompile(`(?m)^\s+` + label + `\s+(\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("summary lacks %q:\n%s", label, out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	succeeded, failed := num("succeeded"), num("failed")
	if succeeded+failed != 300 || succeeded < 180 || failed < 30 {
		t.Errorf("succeeded %d, failed %d; want all 300 accounted for, the healthy 60%% succeeded and the down 10%% failed\n%s", succeeded, failed, out)
	}
	if !strings.Contains(out, "jobs/s") || !strings.Contains(errOut, "progress: ") {
		t.Errorf("want a summary with the throughput and plain progress lines when stderr is not a terminal\n%s\n%s", out, errOut)
	}
}
