// Package jsonscan reads the common shapes of small JSON documents without
// reflection, for the fast paths of hot decoders (a job request at the API,
// an http job's payload at each delivery), and writes JSON strings
// (AppendString) for the matching encoders. It accepts a strict subset of
// JSON and declines the rest; callers fall back to encoding/json, and a
// differential fuzz test next to each caller holds the fast path to
// encoding/json's result.
package jsonscan

import (
	"slices"
	"unicode/utf8"
)

// Scanner reads JSON of the common shapes only: strings with simple
// escapes, objects and arrays of them, small integers. Each method reports
// false for anything outside that subset (or malformed); the caller then
// falls back to encoding/json, whose result its fast path must equal.
type Scanner struct {
	b []byte
	i int
}

// New returns a Scanner of b.
func New(b []byte) *Scanner { return &Scanner{b: b} }

func (s *Scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Consume skips white space and then c, if c is next.
func (s *Scanner) Consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.space()
	return s.i == len(s.b)
}

// Text reads a string in valid UTF-8 with no control character, whose
// escapes are the simple ones or \u of a character outside the surrogate
// range.
func (s *Scanner) Text() (string, bool) {
	if !s.Consume('"') {
		return "", false
	}
	start, ascii := s.i, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return "", false
			}
			s.i = j + 1
			return string(v), true
		case c == '\\':
			return s.escaped(start, j)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

// escaped goes on with a string from its first backslash at j.
func (s *Scanner) escaped(start, j int) (string, bool) {
	out := make([]byte, 0, 2*(j-start)+16)
	out = append(out, s.b[start:j]...)
	for j < len(s.b) {
		c := s.b[j]
		switch {
		case c == '"':
			if !utf8.Valid(out) {
				return "", false
			}
			s.i = j + 1
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			j++
			continue
		}
		if j+1 >= len(s.b) {
			return "", false
		}
		switch e := s.b[j+1]; e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			if j+6 > len(s.b) {
				return "", false
			}
			r, ok := Hex4(s.b[j+2 : j+6])
			if !ok || (r >= 0xD800 && r <= 0xDFFF) {
				return "", false // surrogates: encoding/json's rules apply
			}
			out = utf8.AppendRune(out, r)
			j += 4
		default:
			return "", false
		}
		j += 2
	}
	return "", false
}

// Hex4 reads the four hexadecimal digits at the start of b (the digits of
// a \u escape); false if b is shorter or holds another character there.
func Hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Object reads an object, calling member with each key (as Text reads
// it) to read that key's value; member reports false to decline. Keys may
// repeat as far as Object is concerned: member decides.
func (s *Scanner) Object(member func(key string) bool) bool {
	if !s.Consume('{') {
		return false
	}
	if s.Consume('}') {
		return true
	}
	for {
		k, ok := s.Text()
		if !ok || !s.Consume(':') || !member(k) {
			return false
		}
		if s.Consume('}') {
			return true
		}
		if !s.Consume(',') {
			return false
		}
	}
}

// Fields reads an object whose keys are among names, each at most once
// (exact spelling), calling read with the key's index in names to read its
// value. An unknown or repeated key declines.
func (s *Scanner) Fields(names []string, read func(i int) bool) bool {
	var seen uint64
	return s.Object(func(k string) bool {
		i := slices.Index(names, k)
		if i < 0 || i >= 64 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		return read(i)
	})
}

// StringMap reads an object of strings (keys and values as Text reads
// them), each key once.
func (s *Scanner) StringMap() (map[string]string, bool) {
	m := make(map[string]string)
	ok := s.Object(func(k string) bool {
		v, ok := s.Text()
		if _, dup := m[k]; !ok || dup {
			return false
		}
		m[k] = v
		return true
	})
	if !ok {
		return nil, false
	}
	return m, true
}

// StringArray reads an array of strings.
func (s *Scanner) StringArray() ([]string, bool) {
	if !s.Consume('[') {
		return nil, false
	}
	a := []string{}
	if s.Consume(']') {
		return a, true
	}
	for {
		v, ok := s.Text()
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if s.Consume(']') {
			return a, true
		}
		if !s.Consume(',') {
			return nil, false
		}
	}
}

// SmallInt reads a non-negative integer of at most 9 digits with no leading
// zero, fraction or exponent.
func (s *Scanner) SmallInt() (int, bool) {
	s.space()
	n, digits := 0, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if digits == 9 || (digits == 1 && n == 0) {
			return 0, false
		}
		n = n*10 + int(s.b[s.i]-'0')
		digits++
		s.i++
	}
	if digits == 0 || (s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E')) {
		return 0, false
	}
	return n, true
}

// AppendString appends s as a JSON string the way encoding/json does
// with HTML escaping off: invalid UTF-8 becomes U+FFFD, and U+2028 and
// U+2029 are escaped.
func AppendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
