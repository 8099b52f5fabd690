package kinds

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestHTTPTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"http://example.com/x", "http://example.com:80"},
		{"https://example.com", "https://example.com:443"},
		{"HTTPS://Example.COM:8443/a?b=c", "https://example.com:8443"},
		{"http://127.0.0.1:7070/hook", "http://127.0.0.1:7070"},
		{"http://[::1]/x", "http://[::1]:80"},
		{"https://user:pw@api.example.com/v1", "https://api.example.com:443"},
	} {
		got, err := HTTPTarget(tc.url)
		if err != nil || got != tc.want {
			t.Errorf("HTTPTarget(%q) = %q, %v; want %q", tc.url, got, err, tc.want)
		}
	}
}

func TestParseURLRefuses(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"", "ftp://example.com/x", "file:///etc/passwd", "example.com/x", "/relative",
		"http://", "http:///path", "http:opaque", "gopher://x", "http://host:0/", "http://host:65536/",
		"http://host:port/", "javascript:alert(1)", "http://[::1/", "unix:///var/run/x.sock",
	} {
		if _, err := ParseURL(raw); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseURL(%q) err = %v; want ErrInvalid", raw, err)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	list := []string{"example.com", "api.partner.io:8443", "*.hooks.dev", "[::1]", "10.0.0.1"}
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://example.com/x", true},
		{"http://EXAMPLE.com:9999/x", true},
		{"https://sub.example.com/", false},
		{"https://api.partner.io:8443/", true},
		{"https://api.partner.io/", false},
		{"https://a.hooks.dev/", true},
		{"https://a.b.hooks.dev/", true},
		{"https://hooks.dev/", false},
		{"https://evilhooks.dev/", false},
		{"http://[::1]:8080/", true},
		{"http://10.0.0.1/", true},
		{"http://10.0.0.2/", false},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := HostAllowed(u, list); got != tc.want {
			t.Errorf("HostAllowed(%q) = %v; want %v", tc.url, got, tc.want)
		}
	}
	u, _ := url.Parse("http://anything.example/")
	if !HostAllowed(u, nil) {
		t.Error("an empty allow-list must allow every host")
	}
}

func TestHTTPRequestValidate(t *testing.T) {
	t.Parallel()
	r := HTTPRequest{URL: "http://example.com/x", Method: "put", Headers: map[string]string{"X-A": "b\tc"}}
	if err := r.Validate(nil); err != nil {
		t.Fatal(err)
	}
	if r.Method != "PUT" {
		t.Errorf("method = %q; want PUT", r.Method)
	}
	r = HTTPRequest{URL: "http://example.com/x"}
	if err := r.Validate(nil); err != nil || r.Method != DefaultMethod {
		t.Errorf("default method: %q, %v", r.Method, err)
	}
	many := map[string]string{}
	for i := range maxHeaders + 1 {
		many["X-H"+strings.Repeat("a", i)] = "v"
	}
	for name, tc := range map[string]struct {
		req  HTTPRequest
		want error
	}{
		"scheme":         {HTTPRequest{URL: "ftp://x/"}, ErrInvalid},
		"method space":   {HTTPRequest{URL: "http://x/", Method: "GE T"}, ErrInvalid},
		"method newline": {HTTPRequest{URL: "http://x/", Method: "GET\r\nX: y"}, ErrInvalid},
		"header name":    {HTTPRequest{URL: "http://x/", Headers: map[string]string{"Bad Name": "v"}}, ErrInvalid},
		"header empty":   {HTTPRequest{URL: "http://x/", Headers: map[string]string{"": "v"}}, ErrInvalid},
		"header CRLF":    {HTTPRequest{URL: "http://x/", Headers: map[string]string{"X-A": "v\r\nInjected: 1"}}, ErrInvalid},
		"header NUL":     {HTTPRequest{URL: "http://x/", Headers: map[string]string{"X-A": "v\x00"}}, ErrInvalid},
		"reserved id":    {HTTPRequest{URL: "http://x/", Headers: map[string]string{"runlog-job-id": "7"}}, ErrInvalid},
		"reserved try":   {HTTPRequest{URL: "http://x/", Headers: map[string]string{"Runlog-Attempt": "1"}}, ErrInvalid},
		"too many":       {HTTPRequest{URL: "http://x/", Headers: many}, ErrInvalid},
		"not allow-list": {HTTPRequest{URL: "http://other.example/"}, ErrHostNotAllowed},
	} {
		allow := []string{"x"}
		if err := tc.req.Validate(allow); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v; want %v", name, err, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status int
		want   statusClass
	}{
		{200, classSuccess}, {201, classSuccess}, {204, classSuccess}, {299, classSuccess},
		{408, classRetryable}, {429, classRetryable}, {500, classRetryable}, {502, classRetryable},
		{503, classRetryable}, {504, classRetryable}, {599, classRetryable},
		{100, classPermanent}, {301, classPermanent}, {302, classPermanent}, {304, classPermanent},
		{400, classPermanent}, {401, classPermanent}, {403, classPermanent}, {404, classPermanent},
		{409, classPermanent}, {410, classPermanent}, {422, classPermanent}, {600, classPermanent},
	} {
		if got := classify(tc.status); got != tc.want {
			t.Errorf("classify(%d) = %v; want %v", tc.status, got, tc.want)
		}
	}
	if err := statusOutcome(204, "", time.Now()); err != nil {
		t.Errorf("204: %v", err)
	}
	if err := statusOutcome(503, "", time.Now()); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"1", time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"86400", 24 * time.Hour, true},
		{"86401", MaxRetryAfter, true},
		{"99999999999999999999999", MaxRetryAfter, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, false},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), MaxRetryAfter, true},
		{now.Add(30 * time.Second).Format(time.RFC850), 30 * time.Second, true},
	} {
		got, ok := parseRetryAfter(tc.v, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

func TestNewClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	c := NewClient(4, nil)
	if c.CheckRedirect == nil || c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Fatal("the http kind's client must return 3xx answers instead of following them")
	}
	if c.Timeout != 0 {
		t.Error("the attempt's context bounds a delivery; the client must not add its own timeout")
	}
}

// FuzzAppendJSON: the hand-written payload encoder gives encoding/json's
// bytes (HTML escaping off) for any request, valid UTF-8 or not.
func FuzzAppendJSON(f *testing.F) {
	f.Add("http://x/", "POST", "A", "b", "body")
	f.Add("http://x/\u2028", "", "", "", "")
	f.Add("\x00\x1f\"\\<>&\u007f\u2029", "get", "k\xff", "\b\f\n\r\t", "\xe2\x28\xa1")
	f.Fuzz(func(t *testing.T, url, method, hk, hv, body string) {
		r := HTTPRequest{URL: url, Method: method, Body: body}
		if hk != "" {
			r.Headers = map[string]string{hk: hv, hk + "2": body}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
		if got := string(r.AppendJSON(nil)) + "\n"; got != want.String() {
			t.Fatalf("AppendJSON:\ngot  %s\nwant %s", got, want.String())
		}
	})
}

// TestCheckTargetIsHTTPTarget: Check returns HTTPTarget's answer from its
// one parse.
func TestCheckTargetIsHTTPTarget(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://x/", "https://Example.com/a", "http://[::1]:8080/x", "https://h:8443"} {
		r := HTTPRequest{URL: u}
		got, err := r.Check(nil)
		want, werr := HTTPTarget(u)
		if err != nil || werr != nil || got != want {
			t.Fatalf("%s: Check %q %v, HTTPTarget %q %v", u, got, err, want, werr)
		}
	}
}

// FuzzHTTPRequestUnmarshal: decoding a payload through UnmarshalJSON (the
// fast path, or encoding/json when it declines) gives what encoding/json
// alone gives, error or value, for any input.
func FuzzHTTPRequestUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"url":"http://x/","method":"POST","headers":{"A":"b"},"body":"{\"k\":1}"}`,
		`{"url":"http://x/"}`, `{}`, ` {"body":"\u00e9\n"} `, `{"url":"a","url":"b"}`, `{"URL":"x"}`,
		`{"headers":null}`, `{"headers":{"a":"1","a":"2"}}`, `{"extra":1,"url":"x"}`, `null`, `[]`, `{"url":1}`,
		`{"url":"x"} {}`, `{"body":"\ud83d\ude00"}`, "{\"body\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		type plain HTTPRequest
		var want plain
		werr := json.Unmarshal(data, &want)
		var got HTTPRequest
		gerr := json.Unmarshal(data, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: encoding/json says %v, UnmarshalJSON %v", data, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(HTTPRequest(want), got) {
			t.Fatalf("%q:\nfast %#v\nstd  %#v", data, got, want)
		}
	})
}

// TestHTTPRequestFastPathTaken: AppendJSON's own output takes the fast path.
func TestHTTPRequestFastPathTaken(t *testing.T) {
	t.Parallel()
	r := HTTPRequest{URL: "http://x/a", Method: "PUT", Headers: map[string]string{"A": "b\"c"}, Body: "{\"k\":\"é\"}\n"}
	var got HTTPRequest
	if !got.decodeFast(r.AppendJSON(nil)) || !reflect.DeepEqual(got, r) {
		t.Fatalf("fast path on AppendJSON's output: %#v", got)
	}
}
