package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// format is the -o flag: how a command prints its answer.
type format string

// The output formats.
const (
	formatTable format = "table"
	formatJSON  format = "json"
)

// String returns the format (flag.Value).
func (f *format) String() string { return string(*f) }

// Set accepts table or json (flag.Value).
func (f *format) Set(v string) error {
	switch format(v) {
	case formatTable, formatJSON:
		*f = format(v)
		return nil
	}
	return fmt.Errorf("%q: use table or json", v)
}

// jsonFlag is the old --json: the same as -o json.
type jsonFlag struct{ f *format }

// String reports whether the format is json (flag.Value).
func (j jsonFlag) String() string {
	if j.f != nil && *j.f == formatJSON {
		return "true"
	}
	return "false"
}

// Set sets the format to json for true, table for false (flag.Value).
func (j jsonFlag) Set(v string) error {
	switch v {
	case "true", "1":
		*j.f = formatJSON
	case "false", "0":
		*j.f = formatTable
	default:
		return fmt.Errorf("%q: --json takes no value (or true/false)", v)
	}
	return nil
}

// IsBoolFlag lets --json stand alone (flag's boolFlag).
func (j jsonFlag) IsBoolFlag() bool { return true }

// registerOutput defines -o, --output and --json on fs, all setting f.
func registerOutput(fs *flag.FlagSet, f *format) {
	*f = formatTable
	fs.Var(f, "o", "output `format`: table or json")
	fs.Var(f, "output", "the same as -o `format`")
	fs.Var(jsonFlag{f}, "json", "the same as -o json")
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// usageError is a bad argument found after flag parsing: exit 64.
type usageError struct{ error }

// explain turns an error of a client command into the one line it prints
// (after "runlog CMD: "): the server's own message without the status
// chain, and what to do when the server cannot be reached or refuses the
// token.
func explain(err error, cf *clientFlags) string {
	var apiErr *server.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case http.StatusUnauthorized:
			if cf.token == "" {
				return fmt.Sprintf("the server at %s requires a token (HTTP 401): pass it with --token or RUNLOG_TOKEN", cf.server)
			}
			return fmt.Sprintf("the server at %s refused the token (HTTP 401): --token / RUNLOG_TOKEN must be the token the server runs with (its --token, RUNLOG_TOKEN or --token-file)", cf.server)
		case http.StatusTooManyRequests:
			return fmt.Sprintf("%s (HTTP 429): check --token / RUNLOG_TOKEN before trying again", apiErr.Message)
		}
		return apiErr.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Sprintf("no answer from %s within %v (--request-timeout): is the server overloaded, or is --server / RUNLOG_SERVER the right address?", cf.server, cf.timeout)
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("cannot reach a runlog server at %s: no such host %q: set --server or RUNLOG_SERVER to the server's URL (default %s)", cf.server, dnsErr.Name, DefaultServer)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("cannot reach a runlog server at %s (connection refused): start one with `runlog serve`, or point the client at yours with --server URL or RUNLOG_SERVER", cf.server)
	case errors.As(err, &opErr):
		return fmt.Sprintf("cannot reach a runlog server at %s (%v): check --server / RUNLOG_SERVER and that `runlog serve` runs there", cf.server, opErr.Err)
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return fmt.Sprintf("cannot talk to %s: %v: check --server / RUNLOG_SERVER (e.g. %s)", cf.server, urlErr.Err, DefaultServer)
	}
	return err.Error()
}

// isTimeout reports whether err is a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// checkServerURL refuses a --server that is not an http(s) URL with a host.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--server %q (or RUNLOG_SERVER) is not a URL such as %s", s, DefaultServer)}
	}
	return nil
}

// formatTime prints t in RFC 3339 (UTC), "-" when zero.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
