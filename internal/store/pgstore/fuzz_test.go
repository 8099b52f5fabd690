package pgstore

import "testing"

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
