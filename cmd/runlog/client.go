package main

import (
	"context"
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
	out           format
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", DefaultServer, "the runlog server's `URL`")
	fs.StringVar(&c.token, "token", "", "bearer `token` of the server (prefer RUNLOG_TOKEN)")
	fs.DurationVar(&c.timeout, "request-timeout", 30*time.Second, "how long to wait for the server")
	registerOutput(fs, &c.out)
}

func (c *clientFlags) client() *server.Client {
	return &server.Client{BaseURL: c.server, Token: c.token, HTTP: &http.Client{Timeout: c.timeout}}
}

// argSpec says which positional arguments a command takes: the names of the
// required ones, and whether more of the last may follow.
type argSpec struct {
	names    []string
	variadic bool // the last name may repeat (ID...); with optional, zero are fine too
	optional bool
}

// check returns a usage error that says what is missing or extra.
func (a argSpec) check(pos []string) error {
	switch {
	case len(pos) < len(a.names) && !(a.optional && len(pos) == 0):
		return usageError{fmt.Errorf("missing %s", strings.Join(a.names[len(pos):], " "))}
	case len(pos) > len(a.names) && !a.variadic:
		if len(a.names) == 0 {
			return usageError{fmt.Errorf("unexpected argument %q: this command takes flags only", pos[len(a.names)])}
		}
		return usageError{fmt.Errorf("unexpected argument %q after %s", pos[len(a.names)], strings.Join(a.names, " "))}
	}
	return nil
}

// call is what a client command's body gets.
type call struct {
	ctx            context.Context
	c              *server.Client
	flags          *clientFlags
	pos            []string
	stdout, stderr io.Writer
}

// clientCommand parses a client command's flags and positional arguments
// and runs fn with a client. A usage problem is reported with its reason
// and the usage (exit 64); any other error with one "runlog NAME:" prefix
// and, when the server cannot be reached or refuses the token, what to do
// (exit 1).
func clientCommand(name, synopsis string, a argSpec, argv []string, stdout, stderr io.Writer,
	extra func(fs *flag.FlagSet), fn func(c call) error) int {
	var cf clientFlags
	fs := newFlagSet(name, synopsis, stderr)
	cf.register(fs)
	if extra != nil {
		extra(fs)
	}
	pos, code, ok := parseOrExit(fs, argv, stderr)
	if !ok {
		return code
	}
	err := a.check(pos)
	if err == nil {
		err = checkServerURL(cf.server)
	}
	if err == nil {
		err = fn(call{ctx: context.Background(), c: cf.client(), flags: &cf, pos: pos, stdout: stdout, stderr: stderr})
	}
	if err == nil {
		return exitOK
	}
	var usage usageError
	if errors.As(err, &usage) {
		return usageFail(fs, name, err, stderr)
	}
	var code2 exitCode
	if errors.As(err, &code2) {
		return int(code2)
	}
	fmt.Fprintf(stderr, "runlog %s: %s\n", name, explain(err, &cf))
	return exitFailure
}

// exitCode is an error already reported: the command exits with it.
type exitCode int

func (e exitCode) Error() string { return "exit status " + strconv.Itoa(int(e)) }

func parseID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Errorf("job id %q is not a number", s)}
	}
	return id, nil
}

func runEnqueue(argv []string, stdout, stderr io.Writer) int {
	var (
		req                 server.JobRequest
		headers, argList    listFlag
		metadata            listFlag
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
		fs.Var(&argList, "arg", "exec: an argument (repeatable)")
		fs.StringVar(&req.Stdin, "stdin", "", "exec: standard input")
		fs.StringVar(&req.Key, "key", "", "idempotency key")
		fs.StringVar(&req.RunAt, "run-at", "", "due time, RFC 3339")
		fs.DurationVar(&runIn, "run-in", 0, "due after this long (instead of --run-at)")
		fs.StringVar(&req.Target, "target", "", "breaker key (default: scheme://host:port of the URL)")
		fs.StringVar(&req.Queue, "queue", "", "the job's queue (default: default)")
		fs.IntVar(&req.Priority, "priority", 0, "the job's priority: higher starts first among due jobs, -1000 to 1000")
		fs.StringVar(&req.Timeout, "timeout", "", "attempt timeout, e.g. 30s")
		fs.IntVar(&retryAttempts, "retry-attempts", 0, "attempts, the first included (default: the server's)")
		fs.StringVar(&retryBase, "retry-base", "", "first backoff, e.g. 500ms")
		fs.StringVar(&retryCap, "retry-cap", "", "longest backoff, e.g. 30s")
		fs.StringVar(&retryDeadline, "retry-deadline", "", "deadline from the first due time, e.g. 10m")
		fs.Var(&metadata, "metadata", "a metadata entry of the job as `key=value` (repeatable)")
	}
	return clientCommand("enqueue", "[flags]", argSpec{}, argv, stdout, stderr, extra, func(c call) error {
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
		for _, m := range metadata {
			k, v, ok := strings.Cut(m, "=")
			if !ok {
				return usageError{fmt.Errorf("--metadata %q: want key=value", m)}
			}
			if req.Metadata == nil {
				req.Metadata = map[string]string{}
			}
			req.Metadata[k] = v
		}
		req.Args = argList
		if runIn != 0 {
			if req.RunAt != "" {
				return usageError{errors.New("give --run-at or --run-in, not both")}
			}
			req.RunAt = time.Now().Add(runIn).UTC().Format(time.RFC3339Nano)
		}
		if retryAttempts != 0 || retryBase != "" || retryCap != "" || retryDeadline != "" {
			req.Retry = &server.RetryRequest{Attempts: retryAttempts, Base: retryBase, Cap: retryCap, Deadline: retryDeadline}
		}
		created, err := c.c.Enqueue(c.ctx, req)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, created)
		}
		fmt.Fprintln(c.stdout, created.ID)
		if created.Existing {
			fmt.Fprintf(c.stderr, "runlog enqueue: key %q already held by job %d; nothing was added\n", req.Key, created.ID)
		}
		return nil
	})
}

// defaultLimit is the page size of runlog jobs.
const defaultLimit = 50

// filterFlags are the job filters of jobs, retry and cancel.
type filterFlags struct {
	q server.ListQuery
}

func (f *filterFlags) register(fs *flag.FlagSet, states string) {
	fs.StringVar(&f.q.State, "state", "", "only jobs in this state: "+states)
	fs.StringVar(&f.q.Kind, "kind", "", "only jobs of this kind")
	fs.StringVar(&f.q.Target, "target", "", "only jobs of this target")
	fs.StringVar(&f.q.Q, "q", "", "only jobs whose id or key contains this")
}

// set reports whether any filter is given.
func (f *filterFlags) set() bool {
	return f.q.State != "" || f.q.Kind != "" || f.q.Target != "" || f.q.Q != ""
}

// args are the filters as command-line flags, for a hint to copy.
func (f *filterFlags) args() []string {
	var out []string
	for _, kv := range [][2]string{{"state", f.q.State}, {"kind", f.q.Kind}, {"target", f.q.Target}, {"q", f.q.Q}} {
		if kv[1] != "" {
			out = append(out, "--"+kv[0], shellQuote(kv[1]))
		}
	}
	return out
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func runJobs(argv []string, stdout, stderr io.Writer) int {
	var f filterFlags
	extra := func(fs *flag.FlagSet) {
		f.register(fs, "pending, running, succeeded, failed, cancelled")
		fs.StringVar(&f.q.After, "after", "", "the cursor printed after the previous page")
		fs.IntVar(&f.q.Limit, "limit", defaultLimit, "jobs per page (at most 1000)")
		fs.StringVar(&f.q.Order, "order", "", "newest (default) or oldest first")
	}
	return clientCommand("jobs", "[flags]", argSpec{}, argv, stdout, stderr, extra, func(c call) error {
		list, err := c.c.List(c.ctx, f.q)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, list)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tKIND\tATTEMPTS\tTARGET\tKEY\tLAST ERROR")
		for _, j := range list.Jobs {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", j.ID, j.State, j.Kind, j.Attempts, j.MaxAttempts, j.Target, j.Key, oneLine(j.LastError, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if list.Next != "" {
			fmt.Fprintf(c.stdout, "more: %s\n", nextPage(c.flags, &f, list.Next))
		} else if len(list.Jobs) == 0 {
			fmt.Fprintln(c.stderr, "no jobs match")
		}
		return nil
	})
}

// nextPage is the command that prints the page after cursor next: the same
// filters, page size, order and server.
func nextPage(cf *clientFlags, f *filterFlags, next string) string {
	parts := append([]string{"runlog", "jobs"}, f.args()...)
	if f.q.Limit != defaultLimit {
		parts = append(parts, "--limit", strconv.Itoa(f.q.Limit))
	}
	if f.q.Order != "" {
		parts = append(parts, "--order", shellQuote(f.q.Order))
	}
	if cf.server != DefaultServer {
		parts = append(parts, "--server", shellQuote(cf.server))
	}
	return strings.Join(append(parts, "--after", next), " ")
}

func runJob(argv []string, stdout, stderr io.Writer) int {
	return clientCommand("job", "[flags] ID", argSpec{names: []string{"ID"}}, argv, stdout, stderr, nil, func(c call) error {
		id, err := parseID(c.pos[0])
		if err != nil {
			return err
		}
		j, err := c.c.Job(c.ctx, id)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, j)
		}
		return printJob(c.stdout, j)
	})
}

// printJob prints a job as "field: value" lines and its attempts as a table.
func printJob(w io.Writer, j server.Job) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("id", strconv.FormatUint(j.ID, 10))
	row("state", string(j.State))
	row("kind", j.Kind)
	row("target", j.Target)
	row("queue", j.Queue)
	row("priority", strconv.Itoa(j.Priority))
	row("key", j.Key)
	row("attempts", fmt.Sprintf("%d of %d", j.Attempts, j.MaxAttempts))
	row("enqueued", formatTime(j.EnqueuedAt))
	if !j.DueAt.IsZero() {
		row("due", formatTime(j.DueAt))
	}
	if !j.FinishedAt.IsZero() {
		row("finished", formatTime(j.FinishedAt))
	}
	row("timeout", j.Timeout)
	if r := j.Retry; r != nil {
		s := fmt.Sprintf("%d attempts, backoff %s up to %s", r.Attempts, r.Base, r.Cap)
		if r.Deadline != "" {
			s += ", deadline " + r.Deadline
		}
		row("retry", s)
	}
	row("reason", oneLine(j.Reason, 200))
	row("last error", oneLine(j.LastError, 200))
	row("payload", oneLine(string(j.Payload), 200))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(j.History) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ATTEMPT\tSTARTED\tENDED\tOUTCOME\tERROR")
	for _, a := range j.History {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.N, formatTime(a.StartedAt), formatTime(a.EndedAt), a.Outcome, oneLine(a.Error, 80))
	}
	return tw.Flush()
}

func runTargets(argv []string, stdout, stderr io.Writer) int {
	return clientCommand("targets", "[flags]", argSpec{}, argv, stdout, stderr, nil, func(c call) error {
		list, err := c.c.Targets(c.ctx)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, list)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tBREAKER\tOPEN UNTIL\tRECENT FAILURES\tPROBES\tPENDING\tRUNNING\tRATE LIMIT\tTOKENS\tHOLD UNTIL\tRAMP\tLIFECYCLE")
		for _, t := range list.Targets {
			limit, tokens, ramp := "-", "-", "-"
			if t.Limit != nil {
				limit = fmt.Sprintf("%s/s burst %d", strconv.FormatFloat(t.Limit.Rate, 'f', -1, 64), t.Limit.Burst)
			}
			if t.Tokens != nil {
				tokens = strconv.Itoa(*t.Tokens)
			}
			if t.Ramp != nil {
				ramp = fmt.Sprintf("%d/%d", t.Ramp.InFlight, t.Ramp.Window)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", t.Target, t.State, formatTime(t.OpenUntil), t.RecentFailures, t.ProbesInFlight, t.Pending, t.Running,
				limit, tokens, formatTime(t.HoldUntil), ramp, server.FormatLife(t))
		}
		return tw.Flush()
	})
}

func runStats(argv []string, stdout, stderr io.Writer) int {
	return clientCommand("stats", "[flags]", argSpec{}, argv, stdout, stderr, nil, func(c call) error {
		s, err := c.c.Stats(c.ctx)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, s)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		for _, kv := range []struct {
			k string
			v any
		}{
			{"pending", s.Pending}, {"running", s.Running}, {"succeeded", s.Succeeded}, {"failed", s.Failed},
			{"cancelled", s.Cancelled}, {"pool size", s.PoolSize}, {"in flight", s.InFlight},
			{"oldest due", formatTime(s.OldestDue)}, {"queue lag", (time.Duration(s.QueueLagSeconds * float64(time.Second))).Round(time.Millisecond)},
			{"targets", s.Targets},
		} {
			fmt.Fprintf(tw, "%s:\t%v\n", kv.k, kv.v)
		}
		return tw.Flush()
	})
}
