package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/runlog/runlog/internal/server"
)

func runSchedules(argv []string, stdout, stderr io.Writer) int {
	return clientCommand("schedules", "[flags]", argSpec{}, argv, stdout, stderr, nil, func(c call) error {
		list, err := c.c.Schedules(c.ctx)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, list)
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tWHEN\tNEXT\tPAUSED\tOVERLAP\tCATCH-UP\tKIND\tTARGET\tLAST JOB")
		for _, s := range list.Schedules {
			last := ""
			if s.LastJob != 0 {
				last = strconv.FormatUint(s.LastJob, 10)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", s.Name, when(s), formatTime(s.Next), s.Paused, s.Overlap, s.CatchUp, s.Job.Kind, s.Job.Target, last)
		}
		return tw.Flush()
	})
}

// when is a schedule's timing: "every 1m0s" or "0 3 * * * (Europe/Paris)".
func when(s server.Schedule) string {
	if s.Every != "" {
		return "every " + s.Every
	}
	if s.Timezone != "" {
		return s.Cron + " (" + s.Timezone + ")"
	}
	return s.Cron + " (UTC)"
}

const scheduleSynopsis = "create NAME (--cron EXPR [--timezone ZONE] | --every DURATION) (--job JSON | --url URL) [--overlap skip|allow] [--catch-up latest|skip|all]\n" +
	"       runlog schedule show|pause|resume|delete NAME"

// runSchedule is "runlog schedule ACTION NAME".
func runSchedule(argv []string, stdout, stderr io.Writer) int {
	if len(argv) == 0 || argv[0] == "-h" || argv[0] == "--help" || argv[0] == "-help" {
		w := stderr
		code := exitUsage
		if len(argv) > 0 {
			w, code = stdout, exitOK
		}
		fmt.Fprintf(w, "Usage: runlog schedule %s\n\nRun 'runlog schedule create -h' for the flags.\n", scheduleSynopsis)
		return code
	}
	action, rest := argv[0], argv[1:]
	name := "schedule " + action
	one := argSpec{names: []string{"NAME"}}
	show := func(c call, s server.Schedule) error {
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, s)
		}
		return printSchedule(c.stdout, s)
	}
	switch action {
	case "create":
		var (
			req     server.ScheduleRequest
			job, u  string
			catchUp string
		)
		extra := func(fs *flag.FlagSet) {
			fs.StringVar(&req.Cron, "cron", "", "cron `expression` (minute hour day-of-month month day-of-week), e.g. \"0 3 * * *\"")
			fs.StringVar(&req.Every, "every", "", "a fixed interval instead of --cron (Go `duration`, at least 1s)")
			fs.StringVar(&req.Timezone, "timezone", "", "IANA time `zone` of --cron (default UTC)")
			fs.StringVar(&job, "job", "", "the job each tick enqueues: the `JSON` body of POST /v1/jobs")
			fs.StringVar(&u, "url", "", "shorthand for --job '{\"kind\":\"http\",\"url\":URL}'")
			fs.StringVar(&req.Overlap, "overlap", "", "skip a tick while the previous job is unfinished (skip), or not (allow, the default)")
			fs.StringVar(&catchUp, "catch-up", "", "ticks missed while nothing ran: latest (the default), skip or all")
		}
		return clientCommand(name, scheduleSynopsis, one, rest, stdout, stderr, extra, func(c call) error {
			req.Name, req.CatchUp = c.pos[0], catchUp
			switch {
			case job != "" && u != "":
				return usageError{fmt.Errorf("give --job or --url, not both")}
			case u != "":
				b, err := json.Marshal(server.JobRequest{Kind: "http", URL: u})
				if err != nil {
					return err
				}
				req.Job = b
			case job != "":
				if !json.Valid([]byte(job)) {
					return usageError{fmt.Errorf("--job is not valid JSON; give the body of POST /v1/jobs, e.g. '{\"kind\":\"http\",\"url\":\"https://example.com/\"}'")}
				}
				req.Job = json.RawMessage(job)
			default:
				return usageError{fmt.Errorf("missing --job or --url: what each tick enqueues")}
			}
			s, err := c.c.CreateSchedule(c.ctx, req)
			if err != nil {
				return err
			}
			return show(c, s)
		})
	case "show", "pause", "resume":
		return clientCommand(name, "[flags] NAME", one, rest, stdout, stderr, nil, func(c call) error {
			var s server.Schedule
			var err error
			switch action {
			case "show":
				s, err = c.c.Schedule(c.ctx, c.pos[0])
			case "pause":
				s, err = c.c.PauseSchedule(c.ctx, c.pos[0])
			default:
				s, err = c.c.ResumeSchedule(c.ctx, c.pos[0])
			}
			if err != nil {
				return err
			}
			return show(c, s)
		})
	case "delete":
		return clientCommand(name, "[flags] NAME", one, rest, stdout, stderr, nil, func(c call) error {
			if err := c.c.DeleteSchedule(c.ctx, c.pos[0]); err != nil {
				return err
			}
			if c.flags.out != formatJSON {
				fmt.Fprintf(c.stdout, "deleted schedule %s (the jobs it made stay)\n", c.pos[0])
			}
			return nil
		})
	}
	fmt.Fprintf(stderr, "runlog schedule: unknown action %q\n\nUsage: runlog schedule %s\n", action, scheduleSynopsis)
	return exitUsage
}

// printSchedule prints a schedule as "field: value" lines.
func printSchedule(w io.Writer, s server.Schedule) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"name", s.Name}, {"when", when(s)}, {"next", formatTime(s.Next)}, {"paused", strconv.FormatBool(s.Paused)},
		{"overlap", s.Overlap}, {"catch-up", s.CatchUp}, {"kind", s.Job.Kind}, {"target", s.Job.Target},
		{"payload", oneLine(string(s.Job.Payload), 200)}, {"last tick", formatTime(s.LastTick)},
	} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	if s.LastJob != 0 {
		fmt.Fprintf(tw, "last job:\t%d\n", s.LastJob)
	}
	return tw.Flush()
}
