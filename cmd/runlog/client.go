package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// DefaultServer is the API the client commands talk to by default.
const DefaultServer = "http://127.0.0.1:7070"

// clientFlags are the flags every client command has.
type clientFlags struct {
	server, token string
	timeout       time.Duration
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", DefaultServer, "the runlog server's `URL`")
	fs.StringVar(&c.token, "token", "", "bearer `token` of the server (prefer RUNLOG_TOKEN)")
	fs.DurationVar(&c.timeout, "request-timeout", 30*time.Second, "how long to wait for the server")
}

func (c *clientFlags) client() *server.Client {
	return &server.Client{BaseURL: c.server, Token: c.token, HTTP: &http.Client{Timeout: c.timeout}}
}

// clientCommand parses a client command's flags and positional arguments
// (exactly npos of them) and runs fn with a client.
func clientCommand(name, synopsis string, npos int, args []string, stdout, stderr io.Writer,
	extra func(fs *flag.FlagSet), fn func(ctx context.Context, c *server.Client, pos []string) error) int {
	var cf clientFlags
	fs := newFlagSet(name, synopsis, stderr)
	cf.register(fs)
	if extra != nil {
		extra(fs)
	}
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) != npos {
		fs.Usage()
		return exitUsage
	}
	if err := fn(context.Background(), cf.client(), pos); err != nil {
		fmt.Fprintf(stderr, "runlog %s: %v\n", name, err)
		var usage usageError
		if errors.As(err, &usage) {
			return exitUsage
		}
		return exitFailure
	}
	return exitOK
}

// usageError is a bad argument found after flag parsing.
type usageError struct{ error }

func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Errorf("job id %q is not a number", s)}
	}
	return id, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func runEnqueue(args []string, stdout, stderr io.Writer) int {
	var (
		req                 server.JobRequest
		headers, argv       listFlag
		runIn               time.Duration
		retryAttempts       int
		retryBase, retryCap string
		retryDeadline       string
	)
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&req.Kind, "kind", "http", "job kind: http or exec")
		fs.StringVar(&req.URL, "url", "", "http: the URL to deliver to")
		fs.StringVar(&req.Method, "method", "", "http: request method (default POST)")
		fs.Var(&headers, "header", "http: a request header as `Name: value` (repeatable)")
		fs.StringVar(&req.Body, "body", "", "http: request body")
		fs.StringVar(&req.Command, "command", "", "exec: a command name the server registered")
		fs.Var(&argv, "arg", "exec: an argument (repeatable)")
		fs.StringVar(&req.Stdin, "stdin", "", "exec: standard input")
		fs.StringVar(&req.Key, "key", "", "idempotency key")
		fs.StringVar(&req.RunAt, "run-at", "", "due time, RFC 3339")
		fs.DurationVar(&runIn, "run-in", 0, "due after this long (instead of --run-at)")
		fs.StringVar(&req.Target, "target", "", "breaker key (default: scheme://host:port of the URL)")
		fs.StringVar(&req.Timeout, "timeout", "", "attempt timeout, e.g. 30s")
		fs.IntVar(&retryAttempts, "retry-attempts", 0, "attempts, the first included (default: the server's)")
		fs.StringVar(&retryBase, "retry-base", "", "first backoff, e.g. 500ms")
		fs.StringVar(&retryCap, "retry-cap", "", "longest backoff, e.g. 30s")
		fs.StringVar(&retryDeadline, "retry-deadline", "", "deadline from the first due time, e.g. 10m")
	}
	return clientCommand("enqueue", "[flags]", 0, args, stdout, stderr, extra, func(ctx context.Context, c *server.Client, _ []string) error {
		for _, h := range headers {
			name, value, ok := strings.Cut(h, ":")
			if !ok {
				return usageError{fmt.Errorf("--header %q: want Name: value", h)}
			}
			if req.Headers == nil {
				req.Headers = map[string]string{}
			}
			req.Headers[strings.TrimSpace(name)] = strings.TrimSpace(value)
		}
		req.Args = argv
		if runIn != 0 {
			if req.RunAt != "" {
				return usageError{errors.New("give --run-at or --run-in, not both")}
			}
			req.RunAt = time.Now().Add(runIn).UTC().Format(time.RFC3339Nano)
		}
		if retryAttempts != 0 || retryBase != "" || retryCap != "" || retryDeadline != "" {
			req.Retry = &server.RetryRequest{Attempts: retryAttempts, Base: retryBase, Cap: retryCap, Deadline: retryDeadline}
		}
		created, err := c.Enqueue(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, created.ID)
		if created.Existing {
			fmt.Fprintf(stderr, "runlog enqueue: key %q already held by job %d; nothing was added\n", req.Key, created.ID)
		}
		return nil
	})
}

func runJobs(args []string, stdout, stderr io.Writer) int {
	var (
		q      server.ListQuery
		asJSON bool
	)
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&q.State, "state", "", "only jobs in this state: pending, running, succeeded, failed, cancelled")
		fs.StringVar(&q.Kind, "kind", "", "only jobs of this kind")
		fs.StringVar(&q.Target, "target", "", "only jobs of this target")
		fs.StringVar(&q.Q, "q", "", "only jobs whose id or key contains this")
		fs.StringVar(&q.After, "after", "", "the cursor printed after the previous page")
		fs.IntVar(&q.Limit, "limit", 50, "jobs per page (at most 1000)")
		fs.StringVar(&q.Order, "order", "", "newest (default) or oldest first")
		fs.BoolVar(&asJSON, "json", false, "print the API's JSON")
	}
	return clientCommand("jobs", "[flags]", 0, args, stdout, stderr, extra, func(ctx context.Context, c *server.Client, _ []string) error {
		list, err := c.List(ctx, q)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tKIND\tATTEMPTS\tTARGET\tKEY\tLAST ERROR")
		for _, j := range list.Jobs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.State, j.Kind, j.Attempts, j.MaxAttempts, j.Target, j.Key, oneLine(j.LastError, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if list.Next != "" {
			fmt.Fprintf(stdout, "more: runlog jobs --after %s\n", list.Next)
		}
		return nil
	})
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func runJob(args []string, stdout, stderr io.Writer) int {
	return clientCommand("job", "[flags] ID", 1, args, stdout, stderr, nil, func(ctx context.Context, c *server.Client, pos []string) error {
		id, err := parseID(pos[0])
		if err != nil {
			return err
		}
		j, err := c.Job(ctx, id)
		if err != nil {
			return err
		}
		return printJSON(stdout, j)
	})
}

func runCancel(args []string, stdout, stderr io.Writer) int {
	var reason string
	extra := func(fs *flag.FlagSet) { fs.StringVar(&reason, "reason", "", "why (kept with the job)") }
	return clientCommand("cancel", "[--reason R] ID", 1, args, stdout, stderr, extra, func(ctx context.Context, c *server.Client, pos []string) error {
		id, err := parseID(pos[0])
		if err != nil {
			return err
		}
		j, err := c.Cancel(ctx, id, reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %d %s\n", j.ID, j.State)
		return nil
	})
}

func runRetry(args []string, stdout, stderr io.Writer) int {
	return clientCommand("retry", "[flags] ID", 1, args, stdout, stderr, nil, func(ctx context.Context, c *server.Client, pos []string) error {
		id, err := parseID(pos[0])
		if err != nil {
			return err
		}
		j, err := c.Retry(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %d %s\n", j.ID, j.State)
		return nil
	})
}

func runTargets(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	extra := func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "print the API's JSON") }
	return clientCommand("targets", "[flags]", 0, args, stdout, stderr, extra, func(ctx context.Context, c *server.Client, _ []string) error {
		list, err := c.Targets(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, list)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tBREAKER\tOPEN UNTIL\tRECENT FAILURES\tPROBES\tPENDING\tRUNNING")
		for _, t := range list.Targets {
			until := "-"
			if !t.OpenUntil.IsZero() {
				until = t.OpenUntil.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\n", t.Target, t.State, until, t.RecentFailures, t.ProbesInFlight, t.Pending, t.Running)
		}
		return tw.Flush()
	})
}

func runStats(args []string, stdout, stderr io.Writer) int {
	return clientCommand("stats", "[flags]", 0, args, stdout, stderr, nil, func(ctx context.Context, c *server.Client, _ []string) error {
		s, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		return printJSON(stdout, s)
	})
}
