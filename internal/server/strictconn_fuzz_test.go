package server

import (
	"testing"
)

// FuzzStrictConnScan: strictConn's reading of request heads does not
// depend on how the bytes arrive (one read, or cut anywhere into two or
// byte by byte), never panics, and refuses every head that has a bare LF.
func FuzzStrictConnScan(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
	} {
		f.Add([]byte(seed), uint16(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		verdict := func(parts ...[]byte) (int64, string, int64) {
			c := &strictConn{}
			for _, p := range parts {
				if c.state != scanOff {
					c.scan(p)
				}
			}
			reason := ""
			if r := c.reason.Load(); r != nil {
				reason = *r
			}
			return c.badAt.Load(), reason, c.heads
		}
		bad, reason, heads := verdict(data)
		k := int(cut) % (len(data) + 1)
		if b2, r2, h2 := verdict(data[:k], data[k:]); b2 != bad || r2 != reason || h2 != heads {
			t.Fatalf("cut at %d: badAt %d %q heads %d; in one read: %d %q %d", k, b2, r2, h2, bad, reason, heads)
		}
		if len(data) <= 512 {
			bytes := make([][]byte, len(data))
			for i := range data {
				bytes[i] = data[i : i+1]
			}
			if b3, r3, h3 := verdict(bytes...); b3 != bad || r3 != reason || h3 != heads {
				t.Fatalf("byte by byte: badAt %d %q heads %d; in one read: %d %q %d", b3, r3, h3, bad, reason, heads)
			}
		}
		// A bare LF before the first blank line of the first head is
		// always refused.
		for i, ch := range data {
			if ch == '\n' && (i == 0 || data[i-1] != '\r') {
				if bad == 0 && heads == 0 && !endsHeadBefore(data, i) {
					t.Fatalf("a bare LF at %d of the first head was not refused", i)
				}
				break
			}
			if ch == '\n' && endsHeadBefore(data, i+1) {
				break
			}
		}
	})
}

// endsHeadBefore reports whether data[:n] holds an empty CRLF line after a
// non-empty one (the end of a head).
func endsHeadBefore(data []byte, n int) bool {
	for i := 3; i < n; i++ {
		if data[i] == '\n' && data[i-1] == '\r' && data[i-2] == '\n' && data[i-3] == '\r' {
			return true
		}
	}
	return false
}
