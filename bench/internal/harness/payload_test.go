package harness

import (
	"errors"
	"math"
	"testing"
)

func TestPayloadMarshalIsPayloadSize(t *testing.T) {
	tests := []struct {
		name string
		p    Payload
		want int
	}{
		{"zero", Payload{}, PayloadSize},
		{"typical", Payload{ID: 12345, EnqueuedAt: 1_790_000_000_000_000_000}, PayloadSize},
		{"large id", Payload{ID: 99_999_999, EnqueuedAt: 1_790_000_000_000_000_000}, PayloadSize},
		// Numbers too long to fit leave no padding and overflow the size.
		{"huge", Payload{ID: math.MaxInt64, EnqueuedAt: math.MinInt64}, len(`{"i":9223372036854775807,"t":-9223372036854775808,"p":""}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.p.Marshal()
			if len(b) != tt.want {
				t.Fatalf("len(Marshal()) = %d, want %d: %s", len(b), tt.want, b)
			}
			got, err := ParsePayload(b)
			if err != nil {
				t.Fatalf("ParsePayload(%s): %v", b, err)
			}
			if got.ID != tt.p.ID || got.EnqueuedAt != tt.p.EnqueuedAt {
				t.Fatalf("round trip: got %+v, want %+v", got, tt.p)
			}
		})
	}
}

func TestParsePayloadRejects(t *testing.T) {
	for _, in := range []string{
		``,
		`{}`,
		`{"i":1}`,
		`{"t":1}`,
		`{"i":-1,"t":1}`,
		`{"i":"1","t":1}`,
		`[1,2]`,
		`{"i":1,"t":1`,
		`{"i":01,"t":1,"p":""}`,
	} {
		if _, err := ParsePayload([]byte(in)); !errors.Is(err, ErrBadPayload) {
			t.Errorf("ParsePayload(%q) = %v, want ErrBadPayload", in, err)
		}
	}
}

// FuzzParsePayload checks that no input panics the decoder and that every
// payload it accepts survives a Marshal round trip.
func FuzzParsePayload(f *testing.F) {
	f.Add(Payload{ID: 7, EnqueuedAt: 1_790_000_000_000_000_000}.Marshal())
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePayload(b)
		if err != nil {
			if !errors.Is(err, ErrBadPayload) {
				t.Fatalf("error %v does not wrap ErrBadPayload", err)
			}
			return
		}
		q, err := ParsePayload(p.Marshal())
		if err != nil || q.ID != p.ID || q.EnqueuedAt != p.EnqueuedAt {
			t.Fatalf("round trip of %+v gave %+v, %v", p, q, err)
		}
		// The fast path agrees with encoding/json wherever it applies.
		if fast, ok := parseExact(b); ok {
			slow, err := parseJSON(b)
			if err != nil || slow != fast {
				t.Fatalf("parseExact(%q) = %+v, encoding/json says %+v, %v", b, fast, slow, err)
			}
		}
	})
}
