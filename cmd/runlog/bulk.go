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

	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/walk"
)

// bulkResult is the -o json answer of retry and cancel over many jobs (more
// than one ID, or a filter).
type bulkResult struct {
	// Matched is how many jobs the IDs or the filter named.
	Matched int `json:"matched"`
	// DryRun: nothing was changed (--dry-run).
	DryRun bool `json:"dry_run"`
	// Done are the jobs retried or cancelled.
	Done []uint64 `json:"done"`
	// Skipped are jobs of the filter that changed state between the listing
	// and the action (HTTP 409), so there was nothing to do.
	Skipped []bulkError `json:"skipped"`
	// Failed are the jobs the server refused for another reason.
	Failed []bulkError `json:"failed"`
}

// bulkError is one job the action did not apply to, and why.
type bulkError struct {
	ID    uint64 `json:"id"`
	Error string `json:"error"`
}

// bulkAction is what retry and cancel share: one job's call, the states a
// filter may name, and the words of the messages.
type bulkAction struct {
	name   string   // "retry", "cancel"
	verb   string   // "retried", "cancelled"
	states []string // the states a filter may select; the first ones are the default
	// defaults are the states a filter without --state selects.
	defaults []string
	one      func(c call, id uint64) (server.Job, error)
	// noJob: one answers no job (discard: the job is gone), so one ID
	// answers as many do.
	noJob bool
}

// runBulk runs a over the IDs of c.pos, or over the jobs that f selects
// (then only with --yes, or listing them with --dry-run).
func runBulk(a bulkAction, c call, f *filterFlags, yes, dryRun bool) error {
	if len(c.pos) > 0 && f.set() {
		return usageError{fmt.Errorf("give job IDs or a filter (--state, --kind, --target, --q), not both")}
	}
	if len(c.pos) == 0 && !f.set() {
		return usageError{fmt.Errorf("missing ID...: name the jobs to %s, or select them with a filter (--state, --kind, --target, --q) and --yes", a.name)}
	}
	if len(c.pos) == 1 && !dryRun && !a.noJob {
		id, err := parseID(c.pos[0])
		if err != nil {
			return err
		}
		j, err := a.one(c, id)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, j)
		}
		fmt.Fprintf(c.stdout, "job %d %s\n", j.ID, j.State)
		return nil
	}
	var (
		ids      []uint64
		byFilter = f.set()
	)
	if byFilter {
		states := a.defaults
		if f.q.State != "" {
			if !contains(a.states, f.q.State) {
				return usageError{fmt.Errorf("--state %q: %s takes jobs in state %s", f.q.State, a.name, strings.Join(a.states, " or "))}
			}
			states = []string{f.q.State}
		}
		for _, st := range states {
			q := f.q
			q.State = st
			found, err := listIDs(c, q, maxBulkMatches-len(ids))
			if err != nil {
				return err
			}
			ids = append(ids, found...)
		}
	} else {
		for _, s := range c.pos {
			id, err := parseID(s)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
	}
	res := bulkResult{Matched: len(ids), DryRun: dryRun, Done: []uint64{}, Skipped: []bulkError{}, Failed: []bulkError{}}
	if byFilter && !yes && !dryRun {
		fmt.Fprintf(c.stderr, "runlog %s: %d jobs match %s; nothing was done: add --yes to %s them (or --dry-run to list them)\n",
			a.name, len(ids), strings.Join(f.args(), " "), a.name)
		return exitCode(exitUsage)
	}
	if dryRun {
		res.Done = ids
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, res)
		}
		for _, id := range ids {
			fmt.Fprintln(c.stdout, id)
		}
		fmt.Fprintf(c.stderr, "runlog %s: %d jobs match; nothing was done (--dry-run)\n", a.name, len(ids))
		return nil
	}
	for _, id := range ids {
		j, err := a.one(c, id)
		var apiErr *server.APIError
		switch {
		case err == nil:
			res.Done = append(res.Done, id)
			if c.flags.out == formatTable {
				fmt.Fprintf(c.stdout, "job %d %s\n", j.ID, j.State)
			}
		case byFilter && errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict:
			res.Skipped = append(res.Skipped, bulkError{ID: id, Error: apiErr.Message})
		case errors.As(err, &apiErr) && apiErr.Status != http.StatusUnauthorized && apiErr.Status != http.StatusTooManyRequests && apiErr.Status < 500:
			res.Failed = append(res.Failed, bulkError{ID: id, Error: apiErr.Message})
			if c.flags.out == formatTable {
				fmt.Fprintf(c.stderr, "runlog %s: job %d: %s\n", a.name, id, apiErr.Error())
			}
		default:
			// The server is gone, refuses the token or failed: stop here.
			if c.flags.out == formatJSON {
				_ = printJSON(c.stdout, res)
			}
			return fmt.Errorf("job %d, after %d of %d jobs %s: %s", id, len(res.Done), len(ids), a.verb, explain(err, c.flags))
		}
	}
	if c.flags.out == formatJSON {
		if err := printJSON(c.stdout, res); err != nil {
			return err
		}
	} else {
		msg := fmt.Sprintf("runlog %s: %s %d of %d jobs", a.name, a.verb, len(res.Done), len(ids))
		if len(res.Skipped) > 0 {
			msg += fmt.Sprintf("; %d skipped (their state changed meanwhile)", len(res.Skipped))
		}
		if len(res.Failed) > 0 {
			msg += fmt.Sprintf("; %d refused", len(res.Failed))
		}
		fmt.Fprintln(c.stderr, msg)
	}
	if len(res.Failed) > 0 {
		return exitCode(exitFailure)
	}
	return nil
}

// maxBulkMatches bounds the jobs one retry, cancel or discard by filter
// acts on: beyond it nothing is done (narrow the filter), so that an
// action is never half done by the bound.
const maxBulkMatches = 10_000

// listIDs pages through the jobs of q, oldest first, and returns their
// ids: at most max, or an error saying to narrow the filter.
func listIDs(c call, q server.ListQuery, max int) ([]uint64, error) {
	q.Order = "oldest"
	res, err := walk.Collect(c.ctx, max, 0, func(ctx context.Context, after uint64, limit int) ([]uint64, uint64, error) {
		q.Limit, q.After = limit, ""
		if after != 0 {
			q.After = strconv.FormatUint(after, 10)
		}
		page, err := c.c.List(ctx, q)
		if err != nil {
			return nil, 0, err
		}
		ids := make([]uint64, len(page.Jobs))
		for i, j := range page.Jobs {
			ids[i] = j.ID
		}
		next, err := parseCursor(page.Next)
		return ids, next, err
	}, nil)
	if err != nil {
		return nil, err
	}
	if res.Over {
		return nil, fmt.Errorf("more than %d jobs match; nothing was done: narrow the filter (--state, --kind, --target, --q)", maxBulkMatches)
	}
	return res.Items, nil
}

// parseCursor reads the server's next-page cursor ("" after the last).
func parseCursor(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("the server answered the page cursor %q, not a job id", s)
	}
	return n, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// bulkFlags registers the filter, --yes and --dry-run of retry and cancel.
func bulkFlags(fs *flag.FlagSet, f *filterFlags, states string, yes, dryRun *bool) {
	f.register(fs, states)
	fs.BoolVar(yes, "yes", false, "with a filter: do it (without --yes only the count is printed)")
	fs.BoolVar(dryRun, "dry-run", false, "print the ids of the jobs it would act on, and change nothing")
}

func runCancel(argv []string, stdout, stderr io.Writer) int {
	var (
		reason      string
		f           filterFlags
		yes, dryRun bool
	)
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&reason, "reason", "", "why (kept with the job)")
		bulkFlags(fs, &f, "pending or running (default: both)", &yes, &dryRun)
	}
	a := bulkAction{name: "cancel", verb: "cancelled", states: []string{"pending", "running"}, defaults: []string{"pending", "running"},
		one: func(c call, id uint64) (server.Job, error) { return c.c.Cancel(c.ctx, id, reason) }}
	return clientCommand("cancel", "[--reason R] ID... | --state S [--kind K] [--target T] [--q Q] --yes", argSpec{names: []string{"ID..."}, variadic: true, optional: true}, argv, stdout, stderr, extra,
		func(c call) error { return runBulk(a, c, &f, yes, dryRun) })
}

func runRetry(argv []string, stdout, stderr io.Writer) int {
	var (
		f           filterFlags
		yes, dryRun bool
	)
	extra := func(fs *flag.FlagSet) { bulkFlags(fs, &f, "failed or cancelled (default: failed)", &yes, &dryRun) }
	a := bulkAction{name: "retry", verb: "retried", states: []string{"failed", "cancelled"}, defaults: []string{"failed"},
		one: func(c call, id uint64) (server.Job, error) { return c.c.Retry(c.ctx, id) }}
	return clientCommand("retry", "ID... | --state S [--kind K] [--target T] [--q Q] --yes", argSpec{names: []string{"ID..."}, variadic: true, optional: true}, argv, stdout, stderr, extra,
		func(c call) error { return runBulk(a, c, &f, yes, dryRun) })
}

func runDiscard(argv []string, stdout, stderr io.Writer) int {
	var (
		f           filterFlags
		yes, dryRun bool
	)
	extra := func(fs *flag.FlagSet) {
		bulkFlags(fs, &f, "succeeded, failed or cancelled (default: all three)", &yes, &dryRun)
	}
	a := bulkAction{name: "discard", verb: "discarded", states: []string{"succeeded", "failed", "cancelled"}, defaults: []string{"succeeded", "failed", "cancelled"},
		one: func(c call, id uint64) (server.Job, error) {
			return server.Job{ID: id, State: "discarded"}, c.c.Discard(c.ctx, id)
		}, noJob: true}
	return clientCommand("discard", "ID... | --state S [--kind K] [--target T] [--q Q] --yes", argSpec{names: []string{"ID..."}, variadic: true, optional: true}, argv, stdout, stderr, extra,
		func(c call) error { return runBulk(a, c, &f, yes, dryRun) })
}
