// Command runlog is the runlog job runner's single binary: the server
// (runlog serve), a client of its API (enqueue, jobs, job, cancel, retry,
// targets, stats), the journal tools (journal verify, journal dump) and a
// self-contained demo (runlog demo).
//
// Every flag can also be set by an environment variable: RUNLOG_ followed by
// the flag name in upper case with '-' as '_' (--data is RUNLOG_DATA,
// --retry-base is RUNLOG_RETRY_BASE); repeatable flags take a
// comma-separated list there. A flag on the command line wins.
//
// The client commands print a table by default and the API's JSON with
// -o json; retry and cancel take many IDs, or a filter with --yes.
//
// Exit status: 0 success, 1 failure (the server refused, or cannot be
// reached), 64 bad usage (the reason is printed before the usage), also a
// retry or cancel by filter without --yes; journal verify also exits 2 for
// a torn tail (which opening the journal repairs) and 3 for corruption.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitTorn    = 2
	exitCorrupt = 3
	exitUsage   = 64
)

// command is one subcommand.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
	hidden  bool
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"serve":    {summary: "run the job server (HTTP API, dashboard, metrics) on a journal directory or PostgreSQL", run: runServe},
		"demo":     {summary: "run a self-contained demo: a server, three simulated targets, thousands of jobs", run: runDemo},
		"enqueue":  {summary: "enqueue a job on a server and print its id", run: runEnqueue},
		"jobs":     {summary: "list jobs (filters: --state --kind --target --q)", run: runJobs},
		"job":      {summary: "show one job with its attempts: job ID", run: runJob},
		"cancel":   {summary: "cancel jobs: cancel [--reason R] ID... | --state S ... --yes", run: runCancel},
		"retry":    {summary: "run failed jobs again: retry ID... | --state failed ... --yes", run: runRetry},
		"discard":  {summary: "remove finished jobs for good: discard ID... | --state S ... --yes", run: runDiscard},
		"replay":   {summary: "re-send finished jobs as new jobs: replay ID... | --target T --since TIME [--state S] [--dry-run]", run: runReplay},
		"targets":  {summary: "show each target's breaker, job counts, rate limit, hold and slow start", run: runTargets},
		"limit":    {summary: "set a target's or a queue's rate limit: limit set TARGET | --queue NAME --rate R [--burst B] (--rate 0 removes it)", run: runLimit},
		"queues":   {summary: "show each queue's concurrency, pause, rate limit and job counts", run: runQueues},
		"queue":    {summary: "change a queue: queue pause NAME | resume NAME | set NAME --concurrency N", run: runQueue},
		"stats":    {summary: "show job counts by state and the queue lag", run: runStats},
		"version":  {summary: "print the version, commit and Go toolchain of this binary", run: runVersion},
		"journal":  {summary: "inspect a journal directory: journal verify DIR | dump DIR | state DIR --at SEQ | snapshot DIR", run: runJournal},
		"backup":   {summary: "copy a data directory, consistently, while its server runs or not: backup DIR DEST", run: runBackup},
		"restore":  {summary: "copy a backup into a new data directory, checked: restore BACKUP DIR", run: runRestore},
		"migrate":  {summary: "create or upgrade the PostgreSQL schema: migrate --postgres URL [--plan]", run: runMigrate},
		"loadtest": {summary: "measure enqueue and delivery throughput against a server", run: runLoadtest, hidden: true},
	}
	commands["schedules"] = command{summary: "list the schedules (periodic jobs) with their next ticks", run: runSchedules}
	commands["target"] = command{summary: "enable a disabled target: target enable TARGET (its held jobs are delivered again)", run: runTarget}
	commands["schedule"] = command{summary: "schedule create NAME --cron EXPR|--every D --job JSON | show|pause|resume|delete NAME", run: runSchedule}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return runVersion(args[1:], stdout, stderr)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "runlog: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "runlog: a durable job runner\n\nUsage: runlog COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name, c := range commands {
		if !c.hidden {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-9s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'runlog COMMAND -h' for a command's flags. Every flag can be set by the")
	fmt.Fprintln(w, "environment too: RUNLOG_<FLAG> (e.g. RUNLOG_DATA, RUNLOG_ADDR, RUNLOG_TOKEN, RUNLOG_SERVER).")
	fmt.Fprintln(w, "Client commands print a table, or the API's JSON with -o json (RUNLOG_OUTPUT=json).")
}
