// Command benchrun runs the runlog benchmark: runlog side by side with
// River (PostgreSQL and SQLite), goqite (SQLite) and asynq (Redis).
//
// bench/run.sh starts the servers and calls it; the subcommands are:
//
//	benchrun all     -plan full|smoke -out results.jsonl ...  run the whole matrix, one child process per run
//	benchrun run     -system S -workload W ...                 one run (a child of "all"); prints one JSON result
//	benchrun worker  -system S ...                              a W4 worker process (a child of "run")
//	benchrun machine -dir D                                     describe the machine (JSON)
//	benchrun report  -in results.jsonl -machine m.json -out RESULTS.md
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "all":
		err = cmdAll(args)
	case "run":
		err = cmdRun(args)
	case "worker":
		err = cmdWorker(args)
	case "machine":
		err = cmdMachine(args)
	case "report":
		err = cmdReport(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchrun:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchrun all|run|worker|machine|report [flags] (see -h of each; bench/run.sh runs everything)")
	os.Exit(2)
}
