package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadLeanRequest holds the lean no-op target's reader to what it
// must read whole (a request with or without a body, the flags it
// reports) and to what it must refuse rather than misread.
func TestReadLeanRequest(t *testing.T) {
	t.Parallel()
	const head = "POST /noop HTTP/1.1\r\nHost: 127.0.0.1\r\n"
	for _, tc := range []struct {
		name, in     string
		keep, signed bool
		err          string // "" no error; "EOF" io.EOF
		rest         string // what must be left unread
	}{
		{name: "body", in: head + "Content-Length: 2\r\n\r\n{}NEXT", keep: true, rest: "NEXT"},
		{name: "no body", in: head + "\r\nNEXT", keep: true, rest: "NEXT"},
		{name: "signed, any case", in: head + "webhook-SIGNATURE: v1,abc\r\ncontent-length:  3 \r\n\r\nabcNEXT", keep: true, signed: true, rest: "NEXT"},
		{name: "close", in: head + "Connection: close\r\nContent-Length: 0\r\n\r\n"},
		{name: "idle close", in: "", err: "EOF"},
		{name: "HTTP/1.0", in: "POST /noop HTTP/1.0\r\n\r\n", err: "only HTTP/1.1"},
		{name: "bare LF", in: "POST /noop HTTP/1.1\n\n", err: "only HTTP/1.1"},
		{name: "chunked", in: head + "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", err: "Transfer-Encoding"},
		{name: "bad length", in: head + "Content-Length: -1\r\n\r\n", err: "Content-Length"},
		{name: "huge length", in: head + "Content-Length: 99999999999\r\n\r\n", err: "Content-Length"},
		{name: "short body", in: head + "Content-Length: 5\r\n\r\n{}", err: "body"},
		{name: "no colon", in: head + "Oops\r\n\r\n", err: "header line"},
		{name: "cut headers", in: head + "Content-Length: 2\r\n", err: "header"},
		{name: "long line", in: head + "X: " + strings.Repeat("a", leanMaxLine) + "\r\n\r\n", err: "header"},
		{name: "long headers", in: head + strings.Repeat("X: "+strings.Repeat("a", 1000)+"\r\n", 70) + "\r\n", err: "headers longer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(strings.NewReader(tc.in), leanMaxLine)
			keep, signed, err := readLeanRequest(br)
			switch {
			case tc.err == "EOF":
				if !errors.Is(err, io.EOF) {
					t.Fatalf("err %v, want io.EOF", err)
				}
				return
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one that says %q", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if keep != tc.keep || signed != tc.signed {
				t.Errorf("keep %v signed %v, want %v %v", keep, signed, tc.keep, tc.signed)
			}
			if rest, _ := io.ReadAll(br); string(rest) != tc.rest {
				t.Errorf("left %q unread, want %q", rest, tc.rest)
			}
		})
	}
}

// TestParseStatCPU reads utime and stime after a command name with spaces
// and parentheses, and refuses a line it cannot read.
func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	line := "4242 (run (log) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 31 0 0 20 0 9 0 500 1000 200"
	got, err := parseStatCPU(line)
	if want := 281 * clockTick; err != nil || got != want {
		t.Errorf("parseStatCPU = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"4242 run S 1", "4242 (runlog) S 1 2 3", "4242 (runlog) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 31"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) did not fail", bad)
		}
	}
	own, err := processCPU(0)
	if err != nil || own <= 0 {
		t.Errorf("processCPU(0) = %v, %v; want this process's CPU time", own, err)
	}
}
