package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/runlog/runlog/bench/internal/report"
)

// cmdMachine prints the machine's description as JSON.
func cmdMachine(args []string) error {
	fs := flag.NewFlagSet("machine", flag.ExitOnError)
	dir := fs.String("dir", os.TempDir(), "directory on the filesystem the data directories use")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(report.Describe(*dir))
}

// stringList collects a repeated flag.
type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// cmdReport renders RESULTS.md.
func cmdReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	in := fs.String("in", "results.jsonl", "results written by benchrun all")
	machine := fs.String("machine", "", "machine description written by benchrun machine")
	out := fs.String("out", "RESULTS.md", "the report to write")
	var info report.Info
	fs.StringVar(&info.Plan, "plan", "full", "the plan that produced the results")
	fs.StringVar(&info.Command, "command", "bench/run.sh", "how the results were produced")
	fs.StringVar(&info.RunlogMissing, "runlog-missing", "", "why runlog's column is missing, if it is")
	fs.Var((*stringList)(&info.Notes), "note", "a note for the report (repeatable)")
	fs.Var((*stringList)(&info.Servers), "server", "a server and its settings (repeatable)")
	analysis := fs.String("analysis", "", "a Markdown file of analysis written by hand for these results")
	serversFile := fs.String("servers-file", "", "a file with one -server line per line")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *serversFile != "" {
		b, err := os.ReadFile(*serversFile)
		if err != nil {
			return err
		}
		for line := range strings.Lines(string(b)) {
			if line = strings.TrimSpace(line); line != "" {
				info.Servers = append(info.Servers, line)
			}
		}
	}
	if *analysis != "" {
		b, err := os.ReadFile(*analysis)
		if err != nil {
			return err
		}
		info.Analysis = string(b)
	}
	rs, err := report.ReadResults(*in)
	if err != nil {
		return err
	}
	if *machine != "" {
		b, err := os.ReadFile(*machine)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &info.Machine); err != nil {
			return fmt.Errorf("%s: %w", *machine, err)
		}
	}
	return os.WriteFile(*out, []byte(report.Render(rs, info)), 0o644)
}
