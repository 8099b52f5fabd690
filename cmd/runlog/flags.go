package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// listFlag is a repeatable string flag.
type listFlag []string

// String joins the values with commas (flag.Value).
func (l *listFlag) String() string { return strings.Join(*l, ",") }

// Set appends a value (flag.Value).
func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// localString is a string flag that is never read from the environment:
// runlog demo's --data must not pick up the RUNLOG_DATA of a real server.
type localString string

// String returns the value (flag.Value).
func (l *localString) String() string { return string(*l) }

// Set sets the value (flag.Value).
func (l *localString) Set(v string) error {
	*l = localString(v)
	return nil
}

// byteSize is a size flag: a number of bytes with an optional KiB, MiB or
// GiB (or KB, MB, GB) suffix.
type byteSize int64

// String is the size in bytes (flag.Value).
func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

// Set parses a size such as 1048576, 512KiB or 1MiB (flag.Value).
func (b *byteSize) Set(v string) error {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000}, {"B", 1}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return fmt.Errorf("%q is not a size such as 1048576, 512KiB or 1MiB", v)
	}
	*b = byteSize(n * mult)
	return nil
}

// envName is the environment variable behind a flag.
func envName(flagName string) string {
	return "RUNLOG_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newFlagSet returns a flag set for a subcommand that reports errors to
// stderr and lists the environment variables in its usage.
func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("runlog "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: runlog %s %s\n\nFlags (each also read from RUNLOG_<FLAG>):\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, allowing flags after positional arguments, then fills
// every flag not given on the command line from its environment variable.
// It returns the positional arguments; for -h it returns flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	// -o and --json are short names of --output: only RUNLOG_OUTPUT is read,
	// and not when one of them is on the command line.
	if given["o"] || given["json"] {
		given["output"] = true
	}
	given["o"], given["json"] = true, true
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if _, local := f.Value.(*localString); local || given[f.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok || v == "" {
			return
		}
		values := []string{v}
		if _, repeatable := f.Value.(*listFlag); repeatable {
			values = strings.Split(v, ",")
		}
		for _, one := range values {
			if err := f.Value.Set(strings.TrimSpace(one)); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %v", envName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return pos, envError{errors.Join(errs...)}
	}
	return pos, nil
}

// envError is a bad value in an environment variable (the flag package has
// already reported bad command-line flags).
type envError struct{ error }

// parseOrExit parses like parse and reports a usage problem; ok is false
// when the command must return code.
func parseOrExit(fs *flag.FlagSet, args []string, stderr io.Writer) (pos []string, code int, ok bool) {
	pos, err := parse(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return nil, exitOK, false
	case err != nil:
		var env envError
		if errors.As(err, &env) {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		}
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}
