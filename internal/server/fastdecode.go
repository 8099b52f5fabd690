package server

import "github.com/runlog/runlog/internal/jsonscan"

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
	s := jsonscan.New(data)
	var seen uint32
	ok := s.Object(func(key string) bool {
		bit, ok := fieldBits[key]
		if !ok || seen&bit != 0 {
			return false // unknown (or not exactly spelled) or repeated
		}
		seen |= bit
		switch bit {
		case fKind:
			req.Kind, ok = s.Text()
		case fURL:
			req.URL, ok = s.Text()
		case fMethod:
			req.Method, ok = s.Text()
		case fBody:
			req.Body, ok = s.Text()
		case fCommand:
			req.Command, ok = s.Text()
		case fStdin:
			req.Stdin, ok = s.Text()
		case fKey:
			req.Key, ok = s.Text()
		case fRunAt:
			req.RunAt, ok = s.Text()
		case fTarget:
			req.Target, ok = s.Text()
		case fTimeout:
			req.Timeout, ok = s.Text()
		case fHeaders:
			req.Headers, ok = s.StringMap()
		case fArgs:
			req.Args, ok = s.StringArray()
		case fRetry:
			req.Retry, ok = decodeRetry(s)
		}
		return ok
	})
	return ok && s.End()
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

// decodeRetry reads a retry object: attempts as a plain integer, the
// durations as strings, each at most once.
func decodeRetry(s *jsonscan.Scanner) (*RetryRequest, bool) {
	r := &RetryRequest{}
	var seen [4]bool
	ok := s.Object(func(k string) bool {
		var (
			f  int
			ok bool
		)
		switch k {
		case "attempts":
			r.Attempts, ok = s.SmallInt()
		case "base":
			f = 1
			r.Base, ok = s.Text()
		case "cap":
			f = 2
			r.Cap, ok = s.Text()
		case "deadline":
			f = 3
			r.Deadline, ok = s.Text()
		}
		if !ok || seen[f] {
			return false
		}
		seen[f] = true
		return true
	})
	if !ok {
		return nil, false
	}
	return r, true
}
