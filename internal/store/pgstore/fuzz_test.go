package pgstore

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// FuzzParseCancel: a runlog_cancel payload (which any database client can
// send) names a job of this node only when it is exactly "<id> <node>"
// with a canonical decimal id; nothing else is read as one, and nothing
// panics.
func FuzzParseCancel(f *testing.F) {
	for _, s := range []string{"12 n1", "12 n2", "0 n1", "012 n1", "-3 n1", "12  n1", "12 n1 ", "18446744073709551615 n1", "18446744073709551616 n1", "", " ", "n1", "12"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, payload string) {
		id, ok := parseCancel(payload, "n1")
		if !ok {
			return
		}
		if id == 0 || cancelPayload(id, "n1") != payload {
			t.Fatalf("parseCancel(%q) = %d, which does not print back as the payload", payload, id)
		}
	})
}

// FuzzAppendAttempt: the JSON appendAttempt writes for the latest and
// history columns decodes (as encoding/json reads it, and as PostgreSQL's
// jsonb does when a later start moves it into history) to the same
// attempt, with encoding/json's bytes where no string needs escaping, and
// a history split into its columns reads back as it was.
func FuzzAppendAttempt(f *testing.F) {
	f.Add(uint32(1), int64(1700000000000), int64(0), uint8(0), false, "", []byte(nil), "host-12-ab")
	f.Add(uint32(3), int64(5), int64(9), uint8(2), true, "boom: \"x\" <y> \u2028 \xff", []byte("out\x00"), "n\\1")
	f.Fuzz(func(t *testing.T, n uint32, s, e int64, c uint8, d bool, errText string, out []byte, node string) {
		a := attempt{N: n, StartedAt: s, EndedAt: e, Class: retry.Class(c), Ended: d, Error: errText, Output: out, Node: node}
		b := appendAttempt(nil, a)
		var got attempt
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("appendAttempt(%+v) = %s: not JSON: %v", a, b, err)
		}
		std, _ := json.Marshal(a)
		var want attempt
		if err := json.Unmarshal(std, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("appendAttempt(%+v) = %s, which decodes to %+v; encoding/json's %s to %+v", a, b, got, std, want)
		}
		if !strings.ContainsAny(a.Error+a.Node, "<>&\\\"\u2028\u2029") && utf8.ValidString(a.Error+a.Node) && !hasControl(a.Error+a.Node) && string(std) != string(b) {
			t.Fatalf("appendAttempt = %s, encoding/json %s", b, std)
		}
		h := []attempt{{N: 1, StartedAt: 2, Node: "x"}, want}
		r := newRow()
		r.run.Attempts, r.nodes = []state.Attempt{h[0].attempt(), h[1].attempt()}, []string{h[0].Node, h[1].Node}
		hist, latest := r.splitHistory()
		back, err := readHistory([]byte(hist), &latest)
		if err != nil || (want.N > 1 && !reflect.DeepEqual(back, h)) {
			t.Fatalf("splitHistory(%+v) = %s, %s; read back %+v, %v", h, hist, latest, back, err)
		}
	})
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return r < 0x20 }) >= 0
}
