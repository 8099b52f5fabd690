package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/runlog/runlog"
)

// runLimit runs "runlog limit set TARGET --rate R [--burst B]" or "runlog
// limit set --queue NAME --rate R [--burst B]": PUT /v1/limits. The only
// subcommand is set; --rate 0 removes the limit.
func runLimit(argv []string, stdout, stderr io.Writer) int {
	if len(argv) == 0 || argv[0] != "set" {
		if len(argv) > 0 && (argv[0] == "-h" || argv[0] == "--help" || argv[0] == "help") {
			fmt.Fprintln(stdout, "Usage: runlog limit set TARGET --rate R [--burst B]\n       runlog limit set --queue NAME --rate R [--burst B]\n\nSets TARGET's (or queue NAME's) rate limit on the server (R attempts per\nsecond, bursts of B; --rate 0 removes it). Run 'runlog limit set -h' for the flags.")
			return exitOK
		}
		fmt.Fprintln(stderr, "runlog limit: the subcommand is set: runlog limit set TARGET --rate R [--burst B] (--rate 0 removes the limit)")
		return exitUsage
	}
	rate := math.NaN()
	var (
		burst int
		queue string
	)
	return clientCommand("limit set", "[flags] TARGET | --queue NAME [flags]", argSpec{names: []string{"TARGET"}, optional: true}, argv[1:], stdout, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&queue, "queue", "", "set the rate limit of queue `NAME` (default for the default queue) instead of a target's")
		fs.Func("rate", "attempts per second (required; 0.001 to 1000000, or 0 to remove the limit)", func(s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%q is not a number of attempts per second", s)
			}
			rate = v
			return nil
		})
		fs.IntVar(&burst, "burst", 0, "attempts that may start at once after a quiet time (default 1; leave out with --rate 0)")
	}, func(c call) error {
		switch {
		case queue != "" && len(c.pos) > 0:
			return usageError{fmt.Errorf("give TARGET or --queue NAME, not both (got %q and --queue %q)", c.pos[0], queue)}
		case queue == "" && len(c.pos) == 0:
			return usageError{errors.New("missing TARGET (or --queue NAME for a queue's limit)")}
		case math.IsNaN(rate):
			return usageError{errors.New("--rate is required: attempts per second, or 0 to remove the limit")}
		case queue != "":
			return setQueueLimit(c, queue, rate, burst)
		}
		l, err := c.c.SetLimit(c.ctx, c.pos[0], rate, burst)
		if err != nil {
			return err
		}
		if c.flags.out == formatJSON {
			return printJSON(c.stdout, l)
		}
		if l.Rate == 0 {
			fmt.Fprintf(c.stdout, "%s: no rate limit\n", c.pos[0])
			return nil
		}
		fmt.Fprintf(c.stdout, "%s: %s attempts per second, bursts of %d\n", c.pos[0], strconv.FormatFloat(l.Rate, 'f', -1, 64), l.Burst)
		return nil
	})
}

// limitFlag is a repeatable --rate-limit TARGET=RATE[/BURST].
type limitFlag map[string]runlog.Limit

func (f *limitFlag) String() string { return "" }

func (f *limitFlag) Set(s string) error {
	target, spec, ok := strings.Cut(s, "=")
	if !ok || target == "" {
		return fmt.Errorf("%q: want TARGET=RATE or TARGET=RATE/BURST, e.g. http://127.0.0.1:9000=100/10", s)
	}
	l, err := parseLimit(spec)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if *f == nil {
		*f = make(limitFlag)
	}
	if _, dup := (*f)[target]; dup {
		return fmt.Errorf("%q: %s has a limit already", s, target)
	}
	(*f)[target] = l
	return nil
}

// defaultLimitFlag is --rate-limit-default RATE[/BURST].
type defaultLimitFlag struct{ l runlog.Limit }

func (f *defaultLimitFlag) String() string { return "" }

func (f *defaultLimitFlag) Set(s string) error {
	l, err := parseLimit(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	f.l = l
	return nil
}

// parseLimit parses RATE or RATE/BURST (burst 1 when left out) and checks
// it as the runner will.
func parseLimit(s string) (runlog.Limit, error) {
	rs, bs, hasBurst := strings.Cut(s, "/")
	rate, err := strconv.ParseFloat(rs, 64)
	if err != nil || math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0.001 || rate > 1e6 {
		return runlog.Limit{}, fmt.Errorf("rate %q: want attempts per second between 0.001 and 1000000", rs)
	}
	burst := 1
	if hasBurst {
		burst, err = strconv.Atoi(bs)
		if err != nil || burst < 1 || burst > 1_000_000 {
			return runlog.Limit{}, fmt.Errorf("burst %q: want a whole number from 1 to 1000000", bs)
		}
	}
	return runlog.Limit{Rate: rate, Burst: burst}, nil
}

// slowStart maps --breaker-slow-start to BreakerConfig.SlowStart, whose 0
// is the default: 0 and 1 turn the slow start off.
func slowStart(n int) int {
	if n <= 1 {
		return -1
	}
	return n
}
