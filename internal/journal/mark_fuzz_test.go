package journal

import (
	"bytes"
	"testing"
)

// FuzzDecodeMark: a marker slot decodes only if it is exactly what
// encodeMark writes for the mark it decodes to (so a damaged slot is never
// taken for a marker), and decoding never panics.
func FuzzDecodeMark(f *testing.F) {
	f.Add(encodeMark(mark{gen: 1, index: 2, nextSeq: 3}))
	f.Add(encodeMark(mark{gen: 1 << 60, index: 1, nextSeq: 1 << 40}))
	f.Add(make([]byte, markSlot))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, ok := decodeMark(b)
		if !ok {
			return
		}
		if want := encodeMark(m); !bytes.Equal(b[:40], want[:40]) || !bytes.Equal(b[40:44], want[40:44]) {
			t.Fatalf("slot %x decoded to %+v, which encodes as %x", b[:markSlot], m, want)
		}
	})
}
