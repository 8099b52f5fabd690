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
	return decodeJob(s, req) && s.End()
}

// decodeBatchFast decodes the body of POST /v1/jobs/batch the same way:
// {"jobs": [...]} (the key once, exactly spelled) whose elements each take
// decodeFast's path, and nothing after it. It reports false for anything
// else, and the caller then decodes with encoding/json (FuzzDecodeBatchFast
// holds it to the same result). encoding/json's reflection is most of the
// cost of a batch of 100.
func decodeBatchFast(data []byte, batch *BatchRequest) bool {
	s := jsonscan.New(data)
	ok := s.Fields(batchFields, func(int) bool {
		if !s.Consume('[') {
			return false
		}
		batch.Jobs = []JobRequest{}
		if s.Consume(']') {
			return true
		}
		for {
			batch.Jobs = append(batch.Jobs, JobRequest{})
			if !decodeJob(s, &batch.Jobs[len(batch.Jobs)-1]) {
				return false
			}
			if s.Consume(']') {
				return true
			}
			if !s.Consume(',') {
				return false
			}
		}
	})
	return ok && s.End()
}

// batchFields are BatchRequest's JSON keys.
var batchFields = []string{"jobs"}

// decodeJob reads one job request object at s, as decodeFast describes.
func decodeJob(s *jsonscan.Scanner, req *JobRequest) bool {
	return s.Fields(jobFields, func(i int) bool {
		var ok bool
		switch jobFields[i] {
		case "kind":
			req.Kind, ok = s.Text()
		case "url":
			req.URL, ok = s.Text()
		case "method":
			req.Method, ok = s.Text()
		case "body":
			req.Body, ok = s.Text()
		case "command":
			req.Command, ok = s.Text()
		case "stdin":
			req.Stdin, ok = s.Text()
		case "key":
			req.Key, ok = s.Text()
		case "run_at":
			req.RunAt, ok = s.Text()
		case "target":
			req.Target, ok = s.Text()
		case "timeout":
			req.Timeout, ok = s.Text()
		case "headers":
			req.Headers, ok = s.StringMap()
		case "args":
			req.Args, ok = s.StringArray()
		case "retry":
			req.Retry, ok = decodeRetry(s)
		case "metadata":
			req.Metadata, ok = s.StringMap()
		case "queue":
			req.Queue, ok = s.Text()
		case "priority":
			// A negative priority is left to encoding/json.
			req.Priority, ok = s.SmallInt()
		}
		return ok
	})
}

// jobFields are JobRequest's JSON keys.
var jobFields = []string{"kind", "url", "method", "headers", "body", "command", "args", "stdin", "key", "run_at", "target", "timeout", "retry", "metadata", "queue", "priority"}

// retryFields are RetryRequest's JSON keys, in decodeRetry's order.
var retryFields = []string{"attempts", "base", "cap", "deadline"}

// decodeRetry reads a retry object: attempts as a plain integer, the
// durations as strings, each at most once.
func decodeRetry(s *jsonscan.Scanner) (*RetryRequest, bool) {
	r := &RetryRequest{}
	ok := s.Fields(retryFields, func(i int) bool {
		var ok bool
		switch i {
		case 0:
			r.Attempts, ok = s.SmallInt()
		case 1:
			r.Base, ok = s.Text()
		case 2:
			r.Cap, ok = s.Text()
		case 3:
			r.Deadline, ok = s.Text()
		}
		return ok
	})
	if !ok {
		return nil, false
	}
	return r, true
}
