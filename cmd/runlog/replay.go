package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// runReplay re-sends finished jobs as new jobs linked to them: the jobs
// named by id, or every job of a target finished since a time (optionally
// in one state), after a count with --dry-run.
func runReplay(argv []string, stdout, stderr io.Writer) int {
	var (
		req   server.ReplayRequest
		since time.Duration
	)
	extra := func(fs *flag.FlagSet) {
		fs.StringVar(&req.Target, "target", "", "re-send the jobs of this target (with --since)")
		fs.StringVar(&req.Since, "since", "", "only jobs finished at or after this RFC 3339 time")
		fs.DurationVar(&since, "since-ago", 0, "only jobs finished within this long, e.g. 2h (instead of --since)")
		fs.StringVar(&req.State, "state", "any", "only jobs in this state: failed, succeeded, cancelled or any")
		fs.BoolVar(&req.DryRun, "dry-run", false, "count the jobs and re-send none")
	}
	return clientCommand("replay", "ID... | --target T --since TIME [--state S] [--dry-run]",
		argSpec{names: []string{"ID..."}, variadic: true, optional: true}, argv, stdout, stderr, extra, func(c call) error {
			if len(c.pos) > 0 {
				if req.Target != "" || req.Since != "" || since != 0 || req.DryRun {
					return usageError{errors.New("give job ids or --target with --since, not both")}
				}
				return replayIDs(c)
			}
			if since != 0 {
				if req.Since != "" {
					return usageError{errors.New("give --since or --since-ago, not both")}
				}
				req.Since = time.Now().Add(-since).UTC().Format(time.RFC3339Nano)
			}
			if req.Target == "" || req.Since == "" {
				return usageError{errors.New("give job ids, or --target and --since (or --since-ago)")}
			}
			res, err := c.c.ReplayMatching(c.ctx, req)
			if err != nil {
				return err
			}
			if c.flags.out == formatJSON {
				return printJSON(c.stdout, res)
			}
			if req.DryRun {
				fmt.Fprintf(c.stdout, "%d jobs would be re-sent (run again without --dry-run)\n", res.Count)
				return nil
			}
			for _, id := range res.IDs {
				fmt.Fprintln(c.stdout, id)
			}
			fmt.Fprintf(c.stderr, "runlog replay: %d jobs re-sent\n", res.Count)
			return nil
		})
}

// replayIDs re-sends each job named on the command line and prints the new
// ids ("NEW replay of OLD" in a table), stopping at the first refusal.
func replayIDs(c call) error {
	var jobs []server.Job
	for _, s := range c.pos {
		id, err := parseID(s)
		if err != nil {
			return usageError{err}
		}
		j, err := c.c.Replay(c.ctx, id)
		if err != nil {
			return fmt.Errorf("job %d: %w", id, err)
		}
		jobs = append(jobs, j)
	}
	if c.flags.out == formatJSON {
		return printJSON(c.stdout, jobs)
	}
	for _, j := range jobs {
		fmt.Fprintf(c.stdout, "%d replay of %d\n", j.ID, j.ReplayOf)
	}
	return nil
}
