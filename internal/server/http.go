package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// The HTTP server of runlog serve is net/http's, for every path: one
// implementation of auth, limits, logging and request contexts (cancelled
// when the client leaves). In front of the API and the dashboard, guard
// refuses what a job runner reachable from a browser must not serve: other
// hosts (DNS rebinding), cross-site writes, API writes that are not JSON,
// and the request heads net/http itself would serve but a proxy may read
// differently (strictConn).

// newHTTPServer returns the server for h under the limits of cfg. It must
// serve a strictListener (guard reads the verdicts of its connections).
func newHTTPServer(h http.Handler, cfg Config) *http.Server {
	return &http.Server{
		Handler: h,
		// A request (headers and body) must arrive within the read-header
		// timeout (slow clients are cut off: slowloris), answers be sent
		// within WriteTimeout, and an idle keep-alive connection is closed
		// after IdleTimeout. (Equal header and read timeouts also save
		// net/http one deadline update per request.) net/http also ends a
		// request's context once ReadTimeout has passed since the request
		// began; every handler here answers well within it.
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadHeaderTimeout,
		WriteTimeout:      2 * time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
}

// connKey is the context key of a request's connection (a *strictConn).
type connKey struct{}

// guard checks every request before the API and the dashboard see it.
type guard struct {
	next  http.Handler
	hosts hostSet
	cop   *http.CrossOriginProtection
}

// newGuard returns the guard of next for a server listening on addr that
// also answers to the host names in extra.
func newGuard(next http.Handler, addr string, extra []string) (*guard, error) {
	hosts, err := newHostSet(addr, extra)
	if err != nil {
		return nil, err
	}
	return &guard{next: next, hosts: hosts, cop: http.NewCrossOriginProtection()}, nil
}

// ServeHTTP refuses, in this order: an HTTP version other than 1.0 and 1.1
// (505), a request head strictConn refused (400), CONNECT (405), a Host the
// server does not answer to (421), a cross-site write (403), an API write
// whose body is not JSON (415); and serves the rest.
func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.ProtoMinor > 1 {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusHTTPVersionNotSupported, fmt.Sprintf("%s is not supported; send HTTP/1.1", r.Proto))
		return
	}
	if c, ok := r.Context().Value(connKey{}).(*strictConn); ok {
		if reason := c.verdict(); reason != "" {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusBadRequest, "malformed HTTP request: "+reason)
			return
		}
	}
	if r.TransferEncoding != nil {
		// strictConn does not follow chunked bodies: the next request
		// comes on a new connection.
		w.Header().Set("Connection", "close")
	}
	if r.Method == http.MethodConnect {
		// What follows a CONNECT is a tunnel's bytes, not requests.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusMethodNotAllowed, "CONNECT is not allowed: runlog serve is not a proxy")
		return
	}
	if !g.hosts.allows(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, fmt.Sprintf("this server does not answer to host %q; use its address, localhost, or start it with --hostname NAME (RUNLOG_HOSTNAME) for each other name clients use", r.Host))
		return
	}
	if !writeAllowed(w, r, g.cop, isAPIPath(r.URL.Path)) {
		return
	}
	g.next.ServeHTTP(w, r)
}

// writeAllowed refuses, and answers, a cross-site write (403) and, when
// api, a write whose body is not JSON (415).
func writeAllowed(w http.ResponseWriter, r *http.Request, cop *http.CrossOriginProtection, api bool) bool {
	if err := cop.Check(r); err != nil {
		writeError(w, http.StatusForbidden, "cross-site request refused: a write must come from this server's own pages or from a client that is not a browser (no Origin or Sec-Fetch-Site other than same-origin)")
		return false
	}
	if api && r.ContentLength != 0 && !safeMethod(r.Method) && !isJSON(r.Header.Get("Content-Type")) {
		writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: the API takes JSON bodies; send Content-Type: application/json", r.Header.Get("Content-Type")))
		return false
	}
	return true
}

// MountGuard returns next (an API) behind the checks of runlog serve that
// do not depend on its listener: it refuses cross-site writes (403) and
// writes whose body is not JSON (415). The Host check (421) and the
// request-head checks stay the application server's (see package httpapi).
func MountGuard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if writeAllowed(w, r, cop, true) {
			next.ServeHTTP(w, r)
		}
	})
}

// safeMethod reports whether m is a method that changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// isJSON reports whether a Content-Type value is application/json, with
// any parameters.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// hostSet is the hosts a server answers to, by name (ports are not
// compared: a port forward or a proxy may change them).
type hostSet struct {
	names map[string]bool
	// anyIP admits every IP literal: the server listens on every address
	// (0.0.0.0, ::), so that clients reach it by any of the machine's IPs.
	anyIP bool
}

// newHostSet returns the hosts of a server listening on addr: the host of
// addr, localhost, every loopback IP, the names in extra, and when addr is
// unspecified (0.0.0.0, ::, empty) every IP and the machine's host name.
func newHostSet(addr string, extra []string) (hostSet, error) {
	h := hostSet{names: map[string]bool{"localhost": true}}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return h, fmt.Errorf("server: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		h.anyIP = true
		if name, err := os.Hostname(); err == nil && name != "" {
			h.names[normalHost(name)] = true
		}
	} else {
		h.names[normalHost(host)] = true
	}
	for _, name := range extra {
		n := normalHost(name)
		if n == "" || strings.ContainsAny(n, "/:@ ") && net.ParseIP(n) == nil {
			return h, fmt.Errorf("server: --hostname %q: give a host name such as jobs.example.com or an IP, without scheme or port", name)
		}
		if ip := net.ParseIP(n); ip != nil {
			n = ip.String()
		}
		h.names[n] = true
	}
	return h, nil
}

// normalHost lowercases a host name and drops a trailing dot.
func normalHost(s string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
}

// allows reports whether a request's Host (host or host:port) is one of h.
func (h hostSet) allows(hostport string) bool {
	host := hostport
	if hp, _, err := net.SplitHostPort(hostport); err == nil {
		host = hp
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" {
		return false
	}
	if h.names[host] {
		return true
	}
	host = normalHost(host)
	if h.names[host] {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || h.anyIP || h.names[ip.String()])
}

// strictListener gives strictConns.
type strictListener struct{ net.Listener }

// Accept wraps the accepted connection.
func (l strictListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &strictConn{Conn: c}, nil
}

// strictConn reads the request heads of a connection as they go by and
// marks the first one that net/http would serve although it is malformed:
// a line ending in a bare LF, or both Transfer-Encoding and Content-Length
// (the shape of request smuggling behind a proxy that reads the other
// header). guard refuses that request and every later one on the
// connection. It follows Content-Length bodies to find the next head; after
// a chunked body it stops reading and refuses any later request (guard
// closes such a connection after its answer).
type strictConn struct {
	net.Conn

	// Read by the goroutine that reads the connection only.
	state   int // scanHead, scanBody, scanOff
	skip    int64
	line    [64]byte // the start of the current line
	lineLen int
	lines   int // lines of the current head so far
	prevCR  bool
	sawCL   bool
	sawTE   bool
	cl      int64
	heads   int64 // heads read so far

	badAt  atomic.Int64 // 1 + the index of the first refused head; 0: none
	reason atomic.Pointer[string]
	served atomic.Int64 // requests guard has seen
}

const (
	scanHead = iota
	scanBody
	scanOff
)

// Read reads and scans what it read.
func (c *strictConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.state != scanOff {
		c.scan(p[:n])
	}
	return n, err
}

// CloseWrite shuts the write side, for net/http's lingering close.
func (c *strictConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("server: connection has no CloseWrite")
}

// verdict counts one more request of the connection and returns why it is
// refused, or "".
func (c *strictConn) verdict() string {
	n := c.served.Add(1)
	if bad := c.badAt.Load(); bad != 0 && n >= bad {
		if r := c.reason.Load(); r != nil {
			return *r
		}
		return "the connection sent a malformed request earlier"
	}
	return ""
}

// refuse marks the current head (and every later one) as refused, for
// reason, and stops scanning.
func (c *strictConn) refuse(reason string) {
	c.reason.Store(&reason)
	c.badAt.Store(c.heads + 1)
	c.state = scanOff
}

// refuseNext stops scanning and refuses every head after the one being
// read (or just read), for reason.
func (c *strictConn) refuseNext(reason string) {
	if reason != "" {
		c.reason.Store(&reason)
	}
	c.badAt.Store(c.heads + 2)
	c.state = scanOff
}

// scan follows the bytes b read from the connection.
func (c *strictConn) scan(b []byte) {
	for i := 0; i < len(b); i++ {
		switch c.state {
		case scanOff:
			return
		case scanBody:
			k := min(int64(len(b)-i), c.skip)
			c.skip -= k
			i += int(k) - 1
			if c.skip == 0 {
				c.state = scanHead
			}
			continue
		}
		ch := b[i]
		switch {
		case ch == '\n':
			if !c.prevCR {
				c.refuse("a line ends in a bare LF; end every line of the head with CRLF")
				return
			}
			c.prevCR = false
			c.endLine()
		case c.prevCR:
			c.refuse("a CR not followed by LF in the request head")
			return
		case ch == '\r':
			c.prevCR = true
		default:
			if c.lineLen < len(c.line) {
				c.line[c.lineLen] = ch
			}
			c.lineLen++
		}
	}
}

// endLine handles the line just ended (without its CRLF).
func (c *strictConn) endLine() {
	n := c.lineLen
	line := c.line[:min(n, len(c.line))]
	c.lineLen = 0
	if n == 0 {
		if c.lines == 0 {
			return // net/http refuses an empty request line itself
		}
		c.endHead()
		return
	}
	c.lines++
	if c.lines == 1 {
		return // the request line
	}
	switch {
	case hasFold(line, "transfer-encoding:"):
		c.sawTE = true
	case hasFold(line, "content-length:"):
		if n > len(c.line) {
			c.refuseNext("") // net/http refuses such a length itself
			return
		}
		v := strings.Trim(string(line[len("content-length:"):]), " \t")
		var cl int64
		for _, d := range []byte(v) {
			if d < '0' || d > '9' || cl > 1<<50 {
				cl = -1
				break
			}
			cl = cl*10 + int64(d-'0')
		}
		if cl < 0 || v == "" {
			c.refuseNext("") // net/http refuses it itself
			return
		}
		c.sawCL, c.cl = true, cl
	}
}

// endHead handles the end of a request head.
func (c *strictConn) endHead() {
	if c.sawTE && c.sawCL {
		c.refuse("the request has both Transfer-Encoding and Content-Length; send one")
		return
	}
	if c.sawTE {
		// The chunked body is not followed: refuse any later request
		// (guard closes the connection after this one's answer).
		c.refuseNext("a request after a chunked one on the same connection; open a new connection (the server closes one after a chunked request)")
		return
	}
	c.heads++
	if c.cl > 0 {
		c.state, c.skip = scanBody, c.cl
	}
	c.lines, c.sawCL, c.cl = 0, false, 0
}

// hasFold reports whether b starts with the lower-case ASCII prefix,
// ignoring case.
func hasFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}
