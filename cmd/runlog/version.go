package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/runlog/runlog/internal/buildinfo"
)

// runVersion prints the version, the commit and the Go toolchain the binary
// was built with (-o json for a script).
func runVersion(argv []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "[-o table|json]", stderr)
	var out format
	registerOutput(fs, &out)
	pos, code, ok := parseOrExit(fs, argv, stderr)
	if !ok {
		return code
	}
	if err := (argSpec{}).check(pos); err != nil {
		return usageFail(fs, "version", err, stderr)
	}
	in := buildinfo.Get()
	if out == formatJSON {
		if err := printJSON(stdout, in); err != nil {
			fmt.Fprintf(stderr, "runlog version: %v\n", err)
			return exitFailure
		}
		return exitOK
	}
	modified := ""
	if in.Modified {
		modified = ", with uncommitted changes"
	}
	when := ""
	if in.Time != "" {
		when = " of " + in.Time
	}
	fmt.Fprintf(stdout, "runlog %s (commit %s%s%s, %s)\n", in.Version, in.ShortCommit(), when, modified, in.Go)
	return exitOK
}

// usageFail reports a usage error with its reason, then the usage; it
// returns exitUsage.
func usageFail(fs *flag.FlagSet, name string, err error, stderr io.Writer) int {
	fmt.Fprintf(stderr, "runlog %s: %v\n\n", name, err)
	fs.Usage()
	return exitUsage
}
