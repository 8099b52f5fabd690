package server

import "unicode/utf8"

// decodeFast decodes the common shape of a job request without reflection:
// one JSON object with JobRequest's keys spelled exactly, each at most once;
// string values in valid UTF-8 with no control character and no \u escape
// of a surrogate; headers an object of such strings, args an array of them; retry an
// object whose attempts is a plain integer. It reports false for anything
// else, and the caller then decodes with encoding/json, which gives the same
// result for every input decodeFast accepts (FuzzDecodeFast holds it to
// that) and the precise error for the inputs that are wrong. Decoding is
// the largest cost of POST /v1/jobs after the network; this path takes a
// fraction of encoding/json's time and allocations for it.
func decodeFast(data []byte, req *JobRequest) bool {
	s := fastScanner{b: data}
	if !s.consume('{') {
		return false
	}
	var seen uint32
	if s.consume('}') {
		return s.end()
	}
	for {
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return false
		}
		bit, ok := fieldBits[key]
		if !ok || seen&bit != 0 {
			return false // unknown (or not exactly spelled) or repeated
		}
		seen |= bit
		switch bit {
		case fKind:
			req.Kind, ok = s.str()
		case fURL:
			req.URL, ok = s.str()
		case fMethod:
			req.Method, ok = s.str()
		case fBody:
			req.Body, ok = s.str()
		case fCommand:
			req.Command, ok = s.str()
		case fStdin:
			req.Stdin, ok = s.str()
		case fKey:
			req.Key, ok = s.str()
		case fRunAt:
			req.RunAt, ok = s.str()
		case fTarget:
			req.Target, ok = s.str()
		case fTimeout:
			req.Timeout, ok = s.str()
		case fHeaders:
			req.Headers, ok = s.stringMap()
		case fArgs:
			req.Args, ok = s.stringArray()
		case fRetry:
			req.Retry, ok = s.retry()
		}
		if !ok {
			return false
		}
		if s.consume('}') {
			return s.end()
		}
		if !s.consume(',') {
			return false
		}
	}
}

// The fields of JobRequest, one bit each.
const (
	fKind uint32 = 1 << iota
	fURL
	fMethod
	fHeaders
	fBody
	fCommand
	fArgs
	fStdin
	fKey
	fRunAt
	fTarget
	fTimeout
	fRetry
)

var fieldBits = map[string]uint32{
	"kind": fKind, "url": fURL, "method": fMethod, "headers": fHeaders, "body": fBody,
	"command": fCommand, "args": fArgs, "stdin": fStdin, "key": fKey, "run_at": fRunAt,
	"target": fTarget, "timeout": fTimeout, "retry": fRetry,
}

// fastScanner reads the subset of JSON decodeFast accepts.
type fastScanner struct {
	b []byte
	i int
}

func (s *fastScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, if c is next.
func (s *fastScanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *fastScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// str reads a string in valid UTF-8 with no control character, whose
// escapes are the simple ones or \u of a character outside the surrogate
// range.
func (s *fastScanner) str() (string, bool) {
	if !s.consume('"') {
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
func (s *fastScanner) escaped(start, j int) (string, bool) {
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
			r, ok := hex4(s.b[j+2 : j+6])
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

// hex4 reads four hexadecimal digits.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
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

// stringMap reads an object of strings (keys and values as str reads them).
func (s *fastScanner) stringMap() (map[string]string, bool) {
	if !s.consume('{') {
		return nil, false
	}
	m := make(map[string]string)
	if s.consume('}') {
		return m, true
	}
	for {
		k, ok := s.str()
		if !ok || !s.consume(':') {
			return nil, false
		}
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		m[k] = v
		if s.consume('}') {
			return m, true
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// stringArray reads an array of strings.
func (s *fastScanner) stringArray() ([]string, bool) {
	if !s.consume('[') {
		return nil, false
	}
	a := []string{}
	if s.consume(']') {
		return a, true
	}
	for {
		v, ok := s.str()
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if s.consume(']') {
			return a, true
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// retry reads a retry object: attempts as a plain integer, the durations as
// strings, each at most once.
func (s *fastScanner) retry() (*RetryRequest, bool) {
	if !s.consume('{') {
		return nil, false
	}
	r := &RetryRequest{}
	if s.consume('}') {
		return r, true
	}
	var seen [4]bool
	for {
		k, ok := s.str()
		if !ok || !s.consume(':') {
			return nil, false
		}
		var f int
		switch k {
		case "attempts":
			r.Attempts, ok = s.smallInt()
		case "base":
			f = 1
			r.Base, ok = s.str()
		case "cap":
			f = 2
			r.Cap, ok = s.str()
		case "deadline":
			f = 3
			r.Deadline, ok = s.str()
		default:
			return nil, false
		}
		if !ok || seen[f] {
			return nil, false
		}
		seen[f] = true
		if s.consume('}') {
			return r, true
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// smallInt reads a non-negative integer of at most 9 digits with no leading
// zero, fraction or exponent.
func (s *fastScanner) smallInt() (int, bool) {
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
