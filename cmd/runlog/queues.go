package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/runlog/runlog/internal/server"
)

func runQueues(argv []string, stdout, stderr io.Writer) int {
	return clientCommand("queues", "[flags]", argSpec{}, argv, stdout, stderr, nil, func(c call) error {
		list, err := c.c.Queues(c.ctx)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, list)
		}
		return printQueues(c.stdout, list.Queues...)
	})
}

// printQueues prints queues as a table.
func printQueues(w io.Writer, qs ...server.Queue) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tSTATE\tCONCURRENCY\tRATE LIMIT\tPENDING\tRUNNING")
	for _, q := range qs {
		st, conc := "running", "pool"
		if q.Paused {
			st = "paused"
		}
		if q.Concurrency > 0 {
			conc = strconv.Itoa(q.Concurrency)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", q.Name, st, conc, queueLimitText(q), q.Counts.Pending, q.Counts.Running)
	}
	return tw.Flush()
}

// runQueue changes one queue: queue pause NAME | resume NAME | set NAME
// --concurrency N.
func runQueue(argv []string, stdout, stderr io.Writer) int {
	const synopsis = "pause NAME | resume NAME | set NAME --concurrency N"
	if len(argv) == 0 || (argv[0] != "pause" && argv[0] != "resume" && argv[0] != "set") {
		fmt.Fprintf(stderr, "runlog queue: say what to do: runlog queue %s\n", synopsis)
		return exitUsage
	}
	action := argv[0]
	conc := -1
	var extra func(fs *flag.FlagSet)
	if action == "set" {
		extra = func(fs *flag.FlagSet) {
			fs.IntVar(&conc, "concurrency", -1, "the queue's bound on its attempts in flight (0: only the pool bounds them)")
		}
	}
	return clientCommand("queue "+action, "[flags] NAME", argSpec{names: []string{"NAME"}}, argv[1:], stdout, stderr, extra, func(c call) error {
		var (
			q   server.Queue
			err error
		)
		switch name := c.pos[0]; action {
		case "pause":
			q, err = c.c.PauseQueue(c.ctx, name)
		case "resume":
			q, err = c.c.ResumeQueue(c.ctx, name)
		default:
			if conc < 0 {
				return usageError{fmt.Errorf("--concurrency N is required (0 or more; 0: only the pool bounds the queue)")}
			}
			q, err = c.c.SetQueueConcurrency(c.ctx, name, conc)
		}
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, q)
		}
		return printQueues(c.stdout, q)
	})
}
