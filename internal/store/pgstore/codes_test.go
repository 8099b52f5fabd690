package pgstore

import (
	"strconv"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// TestStoredCodesFrozen pins the codes in this store's SQL and history
// JSON to the Go values they stand for, and to the numbers databases hold:
// renumbering state.JobState, retry.BreakerState or retry.Class would make
// every stored row mean something else, so the test fails instead.
func TestStoredCodesFrozen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code string
		st   state.JobState
		want int
	}{
		{pendingCode, state.Pending, 0}, {runningCode, state.Running, 1}, {succeededCode, state.Succeeded, 2},
		{failedCode, state.Failed, 3}, {cancelledCode, state.Cancelled, 4},
	} {
		if c.code != strconv.Itoa(c.want) || int(c.st) != c.want {
			t.Errorf("job state %v: SQL code %s, Go value %d; both must stay %d", c.st, c.code, c.st, c.want)
		}
		if code, ok := stateCode(c.st.String()); !ok || int(code) != c.want {
			t.Errorf("stateCode(%q) = %d, %v; want %d", c.st, code, ok, c.want)
		}
	}
	for _, c := range []struct {
		st   retry.BreakerState
		want int
	}{{retry.Closed, 0}, {retry.Open, 1}, {retry.HalfOpen, 2}} {
		if int(c.st) != c.want {
			t.Errorf("breaker state %v is %d; runlog_breakers.state holds it as %d", c.st, c.st, c.want)
		}
	}
	if closedCode != strconv.Itoa(int(retry.Closed)) {
		t.Errorf("closedCode %s, retry.Closed %d", closedCode, retry.Closed)
	}
	for _, c := range []struct {
		class retry.Class
		want  int
	}{{retry.Success, 1}, {retry.Retryable, 2}, {retry.Permanent, 3}, {retry.Unsafe, 4}} {
		if int(c.class) != c.want {
			t.Errorf("class %v is %d; the history JSON holds it as %d", c.class, c.class, c.want)
		}
		b := string(appendAttempt(nil, attempt{N: 1, Class: c.class}))
		if !strings.Contains(b, `"c":`+strconv.Itoa(c.want)+",") {
			t.Errorf("an attempt of class %v is stored as %s, want \"c\":%d", c.class, b, c.want)
		}
	}
}
