package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fastShapes are requests of the shapes clients send: the fast path takes
// them.
var fastShapes = []string{
	`{"kind":"http","url":"https://example.com/hook"}`,
	` { "kind" : "http" , "url" : "http://x/" } ` + "\n",
	`{"kind":"http","url":"http://[::1]:8080/x","method":"patch","headers":{"A":"b","C":""},"body":"x","key":"k","run_at":"2030-01-02T03:04:05.123+02:00","timeout":"1.5s","retry":{"attempts":2,"base":"1ms","cap":"2ms","deadline":"1h"}}`,
	`{"kind":"exec","command":"resize","args":["a","b"],"stdin":"in"}`,
	`{"kind":"exec","command":"resize","args":[]}`,
	`{"kind":"http","url":"http://x/","headers":{}}`,
	`{"kind":"http","url":"http://x/","retry":{}}`,
	`{"kind":"http","url":"http://x/","body":"héllo ✓"}`,
	`{"kind":"http","retry":{"attempts":999999999}}`,
	`{}`,
	`{"kind":"http","url":"http://x/","body":"a\"b"}`,
	`{"kind":"http","url":"http://x/","body":"{\"order\":42,\"note\":\"\u00e9\\n\/\t\b\f\r\u2713\"}"}`,
}

// slowShapes are the edges where the fast path must step aside for
// encoding/json: escapes, other spellings, repeats, numbers it does not
// read, nulls, unknown fields, trailing data, invalid JSON.
var slowShapes = []string{
	`{"kind":"http","url":"http://x/","body":"\ud83d\ude00"}`,
	`{"kind":"http","url":"http://x/","body":"\ud83d"}`,
	`{"kind":"http","url":"http://x/","body":"\u00e"}`,
	`{"kind":"http","url":"http://x/","body":"\x"}`,
	`{"kind":"http","url":"http://x/","body":"a\"` + "\xff" + `"}`,
	`{"kind":"http","url":"http://x/","body":"` + "\xff" + `"}`,
	`{"KIND":"http","url":"http://x/"}`,
	`{"kind":"http","kind":"exec"}`,
	`{"kind":"http","headers":{"a":"1","a":"2"}}`,
	`{"kind":"http","retry":{"attempts":012}}`,
	`{"kind":"http","retry":{"attempts":1e2}}`,
	`{"kind":"http","retry":{"attempts":-1}}`,
	`{"kind":"http","retry":{"attempts":1.0}}`,
	`{"kind":"http","retry":{"attempts":1234567890}}`,
	`{"kind":"http","retry":{"attempts":1,"attempts":2}}`,
	`{"kind":"http","retry":null}`,
	`{"kind":"http","headers":null}`,
	`{"kind":"http","args":null}`,
	`{"kind":"http","extra":1}`,
	`{"kind":"http"}{}`, `{"kind":"http"} x`, `null`, `[]`, ``, `{`, `{"kind"}`, `{"kind":}`,
	`{"kind":"http",}`, `{"kind":"http" "url":"x"}`, `{"args":["a",]}`, `{"headers":{"a":1}}`,
	"{\"body\":\"a\tb\"}",
	`{"kind":"http"}}`, `{"kind":"http"}]`, `{"kind":"http"} }}}`,
	`{"kind":"http","key":"bin-\udcff"}`, `{"kind":"http","key":"bin-\ud800\u0041"}`, `{"kind":"http","key":"bin-` + "\xfe" + `"}`,
}

// FuzzDecodeFast: whenever the fast path accepts an input, encoding/json
// (as the API uses it) accepts it too and decodes it to the same request;
// so the fast path changes the speed of POST /v1/jobs and nothing else. It
// also holds the fast path to refusing what encoding/json refuses (trailing
// data: json.Valid) and the strings it would alter (checkText).
func FuzzDecodeFast(f *testing.F) {
	for _, s := range append(fastShapes, slowShapes...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast JobRequest
		if !decodeFast(data, &fast) {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("fast path accepted %q, which is not one JSON value", data)
		}
		if err := checkText(data); err != nil {
			t.Fatalf("fast path accepted %q: %v", data, err)
		}
		var std JobRequest
		if err := decodeStd(data, &std); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q:\nfast %#v\nstd  %#v", data, fast, std)
		}
	})
}

// TestDecodeFastTakesTheCommonShapes: the requests clients usually send do
// take the fast path (else the fuzz test above would hold vacuously).
func TestDecodeFastTakesTheCommonShapes(t *testing.T) {
	t.Parallel()
	for _, s := range fastShapes {
		var req JobRequest
		if !decodeFast([]byte(s), &req) {
			t.Errorf("the fast path refused %s", s)
		}
	}
	for _, s := range slowShapes {
		var req JobRequest
		if decodeFast([]byte(s), &req) {
			t.Errorf("the fast path took %q, which needs encoding/json", s)
		}
	}
}

// TestWriteCreatedMatchesWriteJSON: the hand-built answer of POST /v1/jobs
// is byte for byte writeJSON's, with the same headers.
func TestWriteCreatedMatchesWriteJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		id       uint64
		existing bool
	}{{1, false}, {18446744073709551615, true}, {42, true}} {
		want := httptest.NewRecorder()
		writeJSON(want, http.StatusCreated, Created{ID: c.id, Existing: c.existing})
		got := httptest.NewRecorder()
		writeCreated(got, http.StatusCreated, "", c.id, c.existing)
		if got.Body.String() != want.Body.String() || got.Code != want.Code {
			t.Fatalf("%+v: got %d %q, want %d %q", c, got.Code, got.Body, want.Code, want.Body)
		}
		// (Content-Length: net/http counts it for writeCreated's short
		// answer; TestEnqueueOverSocketAnswersAsHandler reads it over a
		// socket.)
		for _, h := range []string{"Content-Type"} {
			if got.Header().Get(h) != want.Header().Get(h) {
				t.Fatalf("%s: got %q, want %q", h, got.Header().Get(h), want.Header().Get(h))
			}
		}
		if loc := got.Header().Get("Location"); loc != "/v1/jobs/"+strconv.FormatUint(c.id, 10) {
			t.Fatalf("Location %q", loc)
		}
	}
}

// TestCheckText: the strings encoding/json would alter are refused (invalid
// UTF-8, lone surrogate escapes in either half), and text, surrogate pairs
// and escapes that only look like surrogates are not.
func TestCheckText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`{"k":"bin-\udcff"}`, `{"k":"\ud800"}`, `{"k":"\ud800x"}`, `{"k":"\uD800\u0041"}`, `{"k":"\udbff\udbff"}`,
		`{"k":"\ud83d\ude00\ude00"}`, "{\"k\":\"bin-\xff\"}", "{\"k\":\"\xed\xa0\x80\"}", `["\\\udc00"]`,
	} {
		if err := checkText([]byte(s)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v; want a bad request", s, err)
		}
	}
	for _, s := range []string{
		`{"k":"\ud83d\ude00"}`, `{"k":"\uD83D\uDE00"}`, `{"k":"\\udc00"}`, `{"k":"\\\\udc00"}`, `{"k":"é✓😀"}`, `{"k":"\u00ff\ufffd"}`,
		`{"\\":"\"\\ud800"}`, `{`,
	} {
		if err := checkText([]byte(s)); err != nil {
			t.Errorf("%s: %v; want it accepted", s, err)
		}
	}
}

// batchShapes are batch bodies: the first ones of the shapes clients send
// (the fast path takes them), then the edges it must leave to
// encoding/json.
var batchShapes = []string{
	`{"jobs":[]}`, `{}`, ` { "jobs" : [ {"kind":"http","url":"http://x/"} , {"kind":"exec","command":"c","args":["a"]} ] } `,
	`{"jobs":[` + strings.Join(fastShapes, ",") + `]}`,
	// Slow:
	`{"jobs":null}`, `{"jobs":[null]}`, `{"jobs":[{"kind":"http"}],"jobs":[]}`, `{"Jobs":[]}`, `{"jobs":[{}],"x":1}`,
	`{"jobs":[{"kind":"http"}]}}`, `{"jobs":[{"kind":"http"}]}]`, `{"jobs":[{"kind":"http"},]}`, `{"jobs":[{"key":"\udcff"}]}`,
	`{"jobs":[{"key":"` + "\xff" + `"}]}`, `{"jobs":{}}`, `[]`, ``,
}

// FuzzDecodeBatchFast: whenever the batch fast path accepts a body,
// encoding/json (as the API uses it) accepts it too and decodes it to the
// same batch, and the body is one JSON value with no string encoding/json
// would alter; so the fast path changes the speed of POST /v1/jobs/batch and
// nothing else.
func FuzzDecodeBatchFast(f *testing.F) {
	for _, s := range batchShapes {
		f.Add([]byte(s))
	}
	for _, s := range append(fastShapes, slowShapes...) {
		f.Add([]byte(`{"jobs":[` + s + `]}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast BatchRequest
		if !decodeBatchFast(data, &fast) {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("fast path accepted %q, which is not one JSON value", data)
		}
		if err := checkText(data); err != nil {
			t.Fatalf("fast path accepted %q: %v", data, err)
		}
		var std BatchRequest
		if err := decodeBatchStd(data, &std); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", data, err)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q:\nfast %#v\nstd  %#v", data, fast, std)
		}
	})
}

// TestDecodeBatchFastTakesTheCommonShapes: batches of the usual shapes take
// the fast path (else FuzzDecodeBatchFast would hold vacuously) and the
// edges do not.
func TestDecodeBatchFastTakesTheCommonShapes(t *testing.T) {
	t.Parallel()
	for i, s := range batchShapes {
		var b BatchRequest
		if fast := decodeBatchFast([]byte(s), &b); fast != (i < 4) {
			t.Errorf("fast path %v for %q; want %v", fast, s, i < 4)
		}
	}
}
