package kinds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/jsonscan"
)

// Headers that runlog adds to every delivery so that the target can
// deduplicate: the job id and the attempt number (1 for the first attempt).
const (
	HeaderJobID   = "Runlog-Job-Id"
	HeaderAttempt = "Runlog-Attempt"
)

const (
	// DefaultMethod is the method of an http job that names none.
	DefaultMethod = http.MethodPost
	// responseHead is how many bytes of a response body are kept as the
	// attempt's output (after the status line).
	responseHead = 1024
	// responseDrain is how many more bytes are read and discarded so that
	// the connection can be reused; a longer body closes the connection.
	responseDrain = 64 << 10
	// MaxRetryAfter bounds a target's Retry-After so that a hostile or
	// confused target cannot park a job for years.
	MaxRetryAfter = 24 * time.Hour
	// maxHeaders bounds how many headers a job may carry.
	maxHeaders = 100
)

// HTTPRequest is the payload of an http job: the request to deliver.
type HTTPRequest struct {
	// URL is the absolute http or https URL to deliver to.
	URL string `json:"url"`
	// Method is the request method; empty means POST. Validate upper-cases it.
	Method string `json:"method,omitempty"`
	// Headers are added to the request. Runlog-Job-Id and Runlog-Attempt
	// are reserved; Host and the hop-by-hop headers are refused (see
	// CheckHeaders).
	Headers map[string]string `json:"headers,omitempty"`
	// Body is sent as the request body.
	Body string `json:"body,omitempty"`
}

// Validate checks r before it is enqueued and normalises its method (empty
// becomes POST, lower case becomes upper case). allow is the operator's
// allow-list of target hosts (empty allows every host). Errors wrap
// ErrInvalid or ErrHostNotAllowed.
func (r *HTTPRequest) Validate(allow []string) error {
	_, err := r.Check(allow)
	return err
}

// Check is Validate, and returns the job's target as HTTPTarget does, from
// the one parse of the URL.
func (r *HTTPRequest) Check(allow []string) (target string, err error) {
	u, err := ParseURL(r.URL)
	if err != nil {
		return "", err
	}
	if err := r.checkParsed(u, allow); err != nil {
		return "", err
	}
	return u.Scheme + "://" + hostPort(u), nil
}

// checkParsed is the rest of Check once r.URL parsed as u and passed
// checkURL.
func (r *HTTPRequest) checkParsed(u *url.URL, allow []string) error {
	if !HostAllowed(u, allow) {
		return fmt.Errorf("%w: %q is not on the allow-list (--allow-host); ask the operator to add it", ErrHostNotAllowed, u.Host)
	}
	r.normalizeMethod()
	if !isToken(r.Method) {
		return fmt.Errorf("%w: method %q is not a valid HTTP method", ErrInvalid, r.Method)
	}
	return CheckHeaders(r.Headers)
}

// normalizeMethod makes an empty method POST and a lower-case one upper
// case.
func (r *HTTPRequest) normalizeMethod() {
	if r.Method == "" {
		r.Method = DefaultMethod
	}
	r.Method = strings.ToUpper(r.Method)
}

// forbiddenHeaders are the header names (canonical form) that a job may not
// set: Host would let a job reach another virtual host behind an address the
// allow-list admits, and the hop-by-hop and framing headers belong to the
// connection the client makes, not to the job.
var forbiddenHeaders = map[string]string{
	"Host":                "it would reach another virtual host than the url names",
	"Connection":          "a hop-by-hop header, the client's to set per connection",
	"Keep-Alive":          "a hop-by-hop header, the client's to set per connection",
	"Proxy-Connection":    "a hop-by-hop header, the client's to set per connection",
	"Proxy-Authorization": "a hop-by-hop header, meant for a proxy",
	"Proxy-Authenticate":  "a hop-by-hop header, meant for a proxy",
	"Te":                  "a hop-by-hop header, the client's to set per connection",
	"Trailer":             "a hop-by-hop header, the client's to set per connection",
	"Transfer-Encoding":   "the client frames the body itself",
	"Upgrade":             "a hop-by-hop header, the client's to set per connection",
	"Content-Length":      "the client sets it from the body",
}

// CheckHeaders checks the headers of an http job: at most 100, each name a
// valid HTTP token and each value free of control characters (tab
// excepted); the names Runlog-Job-Id and Runlog-Attempt are reserved; Host
// and the hop-by-hop and framing headers (Connection, Keep-Alive,
// Proxy-Connection, Proxy-Authorization, Proxy-Authenticate, TE, Trailer,
// Transfer-Encoding, Upgrade, Content-Length) are refused, in any case.
// Errors wrap ErrInvalid and name the header. HTTPRequest.Check calls it at
// enqueue and again before each delivery.
func CheckHeaders(h map[string]string) error {
	if len(h) > maxHeaders {
		return fmt.Errorf("%w: %d headers, at most %d are allowed", ErrInvalid, len(h), maxHeaders)
	}
	for name, value := range h {
		if !isToken(name) {
			return fmt.Errorf("%w: header name %q is not a valid HTTP header name", ErrInvalid, name)
		}
		canon := http.CanonicalHeaderKey(name)
		switch canon {
		case HeaderJobID, HeaderAttempt:
			return fmt.Errorf("%w: header %q is set by runlog on every delivery; remove it", ErrInvalid, name)
		}
		if why, ok := forbiddenHeaders[canon]; ok {
			return fmt.Errorf("%w: header %q may not be set by a job (%s); remove it", ErrInvalid, name, why)
		}
		if !validHeaderValue(value) {
			return fmt.Errorf("%w: header %q has a control character in its value", ErrInvalid, name)
		}
	}
	return nil
}

// ParseURL parses an http job's URL and checks that it is an absolute http or
// https URL with a host and, if given, a valid port. Errors wrap ErrInvalid.
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, fmt.Errorf("%w: url is required", ErrInvalid)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: url %q does not parse: %v", ErrInvalid, raw, err)
	}
	if err := checkURL(raw, u); err != nil {
		return nil, err
	}
	return u, nil
}

// checkURL is ParseURL's check of u, parsed from raw.
func checkURL(raw string, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%w: url %q: only http and https URLs are accepted", ErrInvalid, raw)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%w: url %q has no host", ErrInvalid, raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > math.MaxUint16 {
			return fmt.Errorf("%w: url %q has an invalid port", ErrInvalid, raw)
		}
	}
	return nil
}

// UnmarshalJSON decodes an http job's payload. The shape AppendJSON writes
// (and clients send) is read without reflection, once per delivery;
// anything else goes to encoding/json, which gives the same result for
// every input the fast path takes (FuzzHTTPRequestUnmarshal holds it to
// that).
func (r *HTTPRequest) UnmarshalJSON(b []byte) error {
	if r.Headers == nil && r.decodeFast(b) {
		return nil
	}
	type plain HTTPRequest // without this method
	return json.Unmarshal(b, (*plain)(r))
}

// decodeFast reads an object with HTTPRequest's exact keys, each once, and
// string values; it changes r only if it reports true.
func (r *HTTPRequest) decodeFast(b []byte) bool {
	httpFields := [...]string{"url", "method", "headers", "body"}
	s := jsonscan.New(b)
	out := *r
	ok := s.Fields(httpFields[:], func(i int) bool {
		var ok bool
		switch i {
		case 0:
			out.URL, ok = s.Text()
		case 1:
			out.Method, ok = s.Text()
		case 2:
			out.Headers, ok = s.StringMap()
		case 3:
			out.Body, ok = s.Text()
		}
		return ok
	})
	if !ok || !s.End() {
		return false
	}
	*r = out
	return true
}

// AppendJSON appends r encoded as encoding/json encodes it with HTML
// escaping off (the payload of an http job), without reflection: the
// server encodes one per POST /v1/jobs.
func (r *HTTPRequest) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"url":`...)
	dst = jsonscan.AppendString(dst, r.URL)
	if r.Method != "" {
		dst = append(dst, `,"method":`...)
		dst = jsonscan.AppendString(dst, r.Method)
	}
	if len(r.Headers) > 0 {
		dst = append(dst, `,"headers":{`...)
		names := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			names = append(names, k)
		}
		slices.Sort(names)
		for i, k := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsonscan.AppendString(dst, k)
			dst = append(dst, ':')
			dst = jsonscan.AppendString(dst, r.Headers[k])
		}
		dst = append(dst, '}')
	}
	if r.Body != "" {
		dst = append(dst, `,"body":`...)
		dst = jsonscan.AppendString(dst, r.Body)
	}
	return append(dst, '}')
}

// HTTPTarget returns the breaker key of an http job: the URL's
// scheme://host:port with the host in lower case and the default port made
// explicit, e.g. "https://example.com:443". Errors wrap ErrInvalid.
func HTTPTarget(rawURL string) (string, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return "", err
	}
	return u.Scheme + "://" + hostPort(u), nil
}

// hostPort returns u's lower-case host and port, the default port of its
// scheme made explicit.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// HostAllowed reports whether u may be targeted under the allow-list. An
// empty list allows every host. An entry is a host name or IP ("example.com",
// "::1"), a host:port pair ("example.com:8443", "[::1]:8080") or a wildcard
// for subdomains ("*.example.com"); names compare case-insensitively.
func HostAllowed(u *url.URL, allow []string) bool {
	if len(allow) == 0 {
		return true
	}
	host := strings.ToLower(u.Hostname())
	hp := hostPort(u)
	for _, entry := range allow {
		entry = strings.ToLower(strings.TrimSpace(entry))
		if h, p, err := net.SplitHostPort(entry); err == nil {
			if net.JoinHostPort(h, p) == hp {
				return true
			}
			continue
		}
		entry = strings.TrimSuffix(strings.TrimPrefix(entry, "["), "]")
		if entry == host {
			return true
		}
		if suffix, ok := strings.CutPrefix(entry, "*."); ok && strings.HasSuffix(host, "."+suffix) {
			return true
		}
	}
	return false
}

// NewClient returns the client the http kind uses by default: it keeps up to
// conns idle connections per host, dials through the SSRF guard g (nil: the
// zero Guard, the rules that hold always), uses no proxy (a proxy would be
// the address dialled, and the guard could not check the target), never
// follows redirects (a 3xx is the target's answer) and has no overall
// timeout (the attempt's context bounds each delivery).
func NewClient(conns int, g *Guard) *http.Client {
	if conns < 1 {
		conns = 1
	}
	if g == nil {
		g = &Guard{}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = g.dialContext
	tr.MaxIdleConns = 4 * conns
	tr.MaxIdleConnsPerHost = conns
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// HTTP returns the handler of the http kind under cfg: cfg.Client sends the
// requests (nil means NewClient(64, &cfg.Guard)); cfg.AllowHosts is checked
// again before each delivery. The handler adds the Runlog-Job-Id and
// Runlog-Attempt headers, records the attempt's delivery log (Delivery:
// status, some response headers, the first KiB of the body, the duration,
// the remote address) as its output, and maps the answer onto an outcome as the
// package doc says. A delivery the SSRF guard refuses fails permanently.
// With cfg.Signer, a delivery to a target that has keys is signed per the
// Standard Webhooks spec (webhook-id, webhook-timestamp, webhook-signature,
// replacing any the job set itself).
func HTTP(cfg Config) runlog.Handler {
	client := cfg.Client
	if client == nil {
		client = NewClient(64, &cfg.Guard)
	}
	d := &deliverer{client: client, allow: cfg.AllowHosts, guard: &cfg.Guard, signer: cfg.Signer}
	return runlog.Handle(func(ctx context.Context, req HTTPRequest) error {
		info, ok := runlog.AttemptFrom(ctx)
		return d.deliver(ctx, info, ok, req)
	})
}

// deliverer is the http kind's handler state.
type deliverer struct {
	client *http.Client
	allow  []string
	guard  *Guard
	signer Signer
	macs   macs
}

// deliver sends req, with the attempt's info when attempt.
func (d *deliverer) deliver(ctx context.Context, info runlog.AttemptInfo, attempt bool, req HTTPRequest) error {
	// The connection's remote address, for the log: the transport says
	// which connection a request went out on only through a trace.
	conn := &connTrace{}
	conn.trace.GotConn = conn.gotConn
	ctx = httptrace.WithClientTrace(ctx, &conn.trace)
	var body io.Reader
	if req.Body != "" {
		body = strings.NewReader(req.Body)
	}
	req.normalizeMethod()
	hreq, err := http.NewRequestWithContext(ctx, req.Method, req.URL, body)
	if err == nil {
		err = checkURL(req.URL, hreq.URL)
	}
	if err == nil {
		err = req.checkParsed(hreq.URL, d.allow)
	} else if verr := req.Validate(d.allow); verr != nil {
		err = verr
	} else {
		return runlog.Permanent(fmt.Errorf("%w: %v", ErrInvalid, err))
	}
	// Checked again: the job may have been journaled by an older version
	// that let more through (a Host header, a host since removed from the
	// allow-list). Such a job fails at once, without contacting anyone.
	if err != nil {
		return runlog.Permanent(fmt.Errorf("refused before delivery, the target was not contacted: %w", err))
	}
	d.setHeaders(hreq, info, attempt, &req)

	var log Delivery
	start := time.Now()
	resp, err := d.client.Do(hreq)
	if err != nil {
		var ge *GuardError
		if errors.As(err, &ge) {
			return runlog.Permanent(fmt.Errorf("not delivered, the target was not contacted: %w", ge))
		}
		log.DurationMS, log.Error = ms(time.Since(start)), err.Error()
		recordDelivery(ctx, &log, nil, conn.remote)
		return fmt.Errorf("deliver %s: %w", req.Method, err)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	n, rerr := io.ReadFull(resp.Body, s.head[:])
	log.BodyTruncated = n > responseHead
	log.DurationMS = ms(time.Since(start))
	if rerr == nil { // more to read: drain some, so that the connection can be reused
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, responseDrain))
	}
	_ = resp.Body.Close()
	log.Status, log.StatusLine, log.Body = resp.StatusCode, resp.Status, string(s.head[:min(n, responseHead)])
	hs, more := logHeaders(s.headers[:0], resp.Header)
	log.HeadersTruncated = more
	recordDelivery(ctx, &log, hs, conn.remote)
	out := statusOutcome(resp.StatusCode, resp.Header.Get("Retry-After"), time.Now())
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return d.redirected(ctx, resp, out)
	}
	return out
}

// setHeaders sets the headers of a delivery of req on hreq: the job's, a
// User-Agent if the job sets none, the attempt's and the signature's. The
// map is made at its size and the values share one array.
func (d *deliverer) setHeaders(hreq *http.Request, info runlog.AttemptInfo, attempt bool, req *HTTPRequest) {
	n := len(req.Headers) + 8
	h := make(http.Header, n)
	vals := make([]string, 0, n)
	set := func(name, value string) {
		vals = append(vals, value)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for name, value := range req.Headers {
		set(http.CanonicalHeaderKey(name), value)
	}
	if h.Get("User-Agent") == "" {
		set("User-Agent", "runlog")
	}
	if _, own := h[HeaderTraceParent]; !own {
		if parent, state := traceContext(hreq.Context()); parent != "" {
			set(HeaderTraceParent, parent)
			if state != "" {
				set(HeaderTraceState, state)
			}
		}
	}
	if attempt {
		set(HeaderJobID, strconv.FormatUint(info.JobID, 10))
		set(HeaderAttempt, strconv.Itoa(info.Attempt))
		if d.signer != nil {
			if keys := d.signer.Keys(info.Target); len(keys) > 0 {
				id, ts := d.signer.MessageID(info.JobID), time.Now().Unix()
				set(HeaderWebhookID, id)
				set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
				set(HeaderWebhookSignature, d.macs.header(keys, id, ts, req.Body))
			}
		}
	}
	hreq.Header = h
}

// The W3C Trace Context headers a delivery carries (canonical form).
const (
	HeaderTraceParent = "Traceparent"
	HeaderTraceState  = "Tracestate"
)

// traceContext returns the trace context a delivery sends on: the
// attempt's span when tracing is on (package otelrunlog's middleware put
// one in ctx), else the job's own "traceparent" and "tracestate" metadata
// (a trace context the client that enqueued the job gave), else nothing.
// A job's own Traceparent header wins over both (the caller's choice).
func traceContext(ctx context.Context) (parent, state string) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String(), sc.TraceState().String()
	}
	md := runlog.MetadataFrom(ctx)
	if p := md["traceparent"]; validTraceParent(p) {
		if st := md["tracestate"]; len(st) <= 512 && printableASCII(st) {
			state = st
		}
		return p, state
	}
	return "", ""
}

// printableASCII reports whether s holds only bytes 0x20-0x7e (what a
// tracestate value may hold, and safe in a header).
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// validTraceParent reports whether p is a version 00 traceparent value:
// "00-" 32 hex digits "-" 16 hex digits "-" 2 hex digits, lowercase, with
// trace and span ids not all zero. Metadata is the client's text: only a
// well-formed value is sent on as a header.
func validTraceParent(p string) bool {
	if len(p) != 55 || p[:3] != "00-" || p[35] != '-' || p[52] != '-' {
		return false
	}
	for i, c := range []byte(p) {
		if i < 3 || i == 35 || i == 52 {
			continue
		}
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return strings.Trim(p[3:35], "0") != "" && strings.Trim(p[36:52], "0") != ""
}

// connTrace learns the remote address of a delivery's connection.
type connTrace struct {
	trace  httptrace.ClientTrace
	remote net.Addr
}

func (c *connTrace) gotConn(ci httptrace.GotConnInfo) {
	if ci.Conn != nil {
		c.remote = ci.Conn.RemoteAddr()
	}
}

// scratch is a delivery's reused memory: the response's head and the
// logged headers.
type scratch struct {
	head    [responseHead + 1]byte
	headers [MaxLoggedHeaders]logHeader
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// recordDelivery records the document of log (with headers hs and the
// remote address) as the attempt's output.
func recordDelivery(ctx context.Context, log *Delivery, hs []logHeader, remote net.Addr) {
	var buf [1024]byte
	runlog.RecordOutput(ctx, log.appendDoc(buf[:0], hs, remote))
}

// redirected is the outcome of a 3xx answer: a permanent failure (err), which
// names the Location and says whether the SSRF guard would refuse it, so
// that a redirect aimed at an internal address is reported as what it is.
func (d *deliverer) redirected(ctx context.Context, resp *http.Response, err error) error {
	loc, lerr := resp.Location()
	if lerr != nil {
		return err
	}
	if gerr := d.guard.checkLocation(ctx, loc); gerr != nil {
		return runlog.Permanent(fmt.Errorf("target answered HTTP %d with Location %s, not followed (redirects never are): %w", resp.StatusCode, loc.Redacted(), gerr))
	}
	return runlog.Permanent(fmt.Errorf("target answered HTTP %d %s with Location %s: redirects are not followed; point the job at the new URL", resp.StatusCode, http.StatusText(resp.StatusCode), loc.Redacted()))
}

// statusClass is how the http kind judges a response status.
type statusClass int

const (
	classSuccess statusClass = iota
	classRetryable
	classPermanent
)

// classify maps a response status onto an outcome class.
func classify(status int) statusClass {
	switch {
	case status >= 200 && status <= 299:
		return classSuccess
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		return classRetryable
	default:
		return classPermanent
	}
}

// statusOutcome turns a response status (and its Retry-After header) into
// the handler's result.
func statusOutcome(status int, retryAfter string, now time.Time) error {
	switch classify(status) {
	case classSuccess:
		return nil
	case classRetryable:
		err := fmt.Errorf("target answered HTTP %d %s", status, http.StatusText(status))
		if d, ok := parseRetryAfter(retryAfter, now); ok {
			return runlog.RetryAfter(d, err)
		}
		return err
	default:
		if status == http.StatusGone {
			// The receiver says the endpoint no longer exists: the job
			// fails and the target is disabled until enabled by hand.
			return runlog.Gone(fmt.Errorf("target answered HTTP 410 Gone: not retried, and the target is disabled until it is enabled by hand (runlog target enable, POST /v1/targets/enable)"))
		}
		return runlog.Permanent(fmt.Errorf("target answered HTTP %d %s: not retried (the target refuses this request as it is, so the same request would be refused again)", status, http.StatusText(status)))
	}
}

// parseRetryAfter parses a Retry-After value, delay-seconds or an HTTP date,
// into a delay from now, at most MaxRetryAfter. It reports false for an
// empty, malformed or past value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return MaxRetryAfter, true
			}
			return 0, false
		}
		if secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d <= 0 {
		return 0, false
	}
	return min(d, MaxRetryAfter), true
}

// isToken reports whether s is a non-empty RFC 9110 token (method and header
// names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v has no control characters other than
// horizontal tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
