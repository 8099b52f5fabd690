package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The load test's no-op targets (--receiver). Both read every request
// whole, headers and body, and answer 200 with an empty body; the target
// shares the machine's cores with the server it measures, so what it costs
// per request is taken from the server.
const (
	// receiverLean reads HTTP/1.1 requests framed by Content-Length off
	// each connection in a loop of its own: a fraction of net/http's CPU
	// per request (no goroutine, context or header map per request).
	receiverLean = "lean"
	// receiverNetHTTP is a net/http server.
	receiverNetHTTP = "net/http"
)

// receiver counts what a no-op target received.
type receiver struct {
	delivered atomic.Int64
	signed    atomic.Int64 // deliveries with a webhook-signature
	lastNanos atomic.Int64 // when the last delivery was read
	refused   atomic.Int64 // requests the lean target could not read
	errOnce   sync.Once
	firstErr  error // why the first refused request was refused
}

// saw counts a delivery read whole.
func (r *receiver) saw(signed bool) {
	if signed {
		r.signed.Add(1)
	}
	r.delivered.Add(1)
	r.lastNanos.Store(time.Now().UnixNano())
}

// refuse counts a request that could not be read, for why.
func (r *receiver) refuse(why error) {
	r.errOnce.Do(func() { r.firstErr = why })
	r.refused.Add(1) // after firstErr is set: who sees the count sees it
}

// serve answers on ln with the target named kind until ln is closed.
func (r *receiver) serve(ln net.Listener, kind string) error {
	if kind == receiverNetHTTP {
		s := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
			_, _ = io.Copy(io.Discard, req.Body)
			r.saw(req.Header.Get("Webhook-Signature") != "")
		})}
		return s.Serve(ln)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go r.serveConn(c)
	}
}

// Bounds of a request the lean target reads.
const (
	leanMaxLine   = 4096     // a request or header line
	leanMaxHeader = 64 << 10 // the request line and headers together
	leanMaxBody   = 1 << 20
)

var (
	leanOK  = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	leanBad = []byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
)

// serveConn reads requests off c and answers each, until c closes or a
// request cannot be read (answered 400 and closed).
func (r *receiver) serveConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, leanMaxLine)
	for {
		keep, signed, err := readLeanRequest(br)
		if errors.Is(err, io.EOF) {
			return // the client closed an idle connection
		}
		if err != nil {
			r.refuse(err)
			_, _ = c.Write(leanBad)
			return
		}
		r.saw(signed)
		if _, err := c.Write(leanOK); err != nil || !keep {
			return
		}
	}
}

// readLeanRequest reads one HTTP/1.1 request from br, headers and body
// (framed by Content-Length; none means no body). keep reports that the
// connection stays open; signed that it had a Webhook-Signature. io.EOF
// means br ended before a request began.
func readLeanRequest(br *bufio.Reader) (keep, signed bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if len(line) == 0 && err == io.EOF {
			return false, false, io.EOF
		}
		return false, false, fmt.Errorf("request line: %w", err)
	}
	if !bytes.HasSuffix(line, []byte(" HTTP/1.1\r\n")) {
		return false, false, fmt.Errorf("request line %.60q: only HTTP/1.1 with CRLF is read", line)
	}
	keep = true
	length, total := int64(0), len(line)
	for {
		line, err = br.ReadSlice('\n')
		if err != nil {
			return false, false, fmt.Errorf("header: %w", err)
		}
		if total += len(line); total > leanMaxHeader {
			return false, false, fmt.Errorf("headers longer than %d bytes", leanMaxHeader)
		}
		if len(line) == 2 && line[0] == '\r' {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.HasSuffix(value, []byte("\r\n")) {
			return false, false, fmt.Errorf("header line %.60q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 || length > leanMaxBody {
				return false, false, fmt.Errorf("Content-Length %.20q: want 0 to %d", value, leanMaxBody)
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			return false, false, errors.New("a Transfer-Encoding: only bodies framed by Content-Length are read")
		case asciiEqualFold(name, "Webhook-Signature"):
			signed = len(value) > 0
		case asciiEqualFold(name, "Connection"):
			keep = !asciiEqualFold(value, "close")
		}
	}
	if _, err := br.Discard(int(length)); err != nil {
		return false, false, fmt.Errorf("body: %w", err)
	}
	return keep, signed, nil
}

// asciiEqualFold reports whether b is s, ASCII letters in any case.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i]|0x20, s[i]|0x20
		if x != y || (x < 'a' || x > 'z') && b[i] != s[i] {
			return false
		}
	}
	return true
}
