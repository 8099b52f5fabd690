package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// disableAfter converts --disable-after to runlog.Config.DisableAfter: 0
// (never) becomes a negative one, as the Config's zero is its default.
func disableAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// runTarget is `runlog target enable TARGET`: it enables a disabled
// target (POST /v1/targets/enable) and prints it.
func runTarget(argv []string, stdout, stderr io.Writer) int {
	const synopsis = "enable TARGET"
	if len(argv) == 0 || argv[0] != "enable" {
		fmt.Fprintf(stderr, "runlog target: say what to do: runlog target %s (runlog targets lists the disabled ones)\n", synopsis)
		return exitUsage
	}
	return clientCommand("target enable", "[flags] TARGET", argSpec{names: []string{"TARGET"}}, argv[1:], stdout, stderr, nil, func(c call) error {
		t, err := c.c.EnableTarget(c.ctx, c.pos[0])
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, t)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tBREAKER\tPENDING\tRUNNING\tLIFECYCLE")
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.Target, t.State, t.Pending, t.Running, server.FormatLife(t))
		return tw.Flush()
	})
}
