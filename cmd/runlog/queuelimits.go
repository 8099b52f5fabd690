package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/server"
)

// setQueueLimit runs "runlog limit set --queue NAME --rate R [--burst B]".
func setQueueLimit(c call, queue string, rate float64, burst int) error {
	l, err := c.c.SetQueueLimit(c.ctx, queue, rate, burst)
	if err != nil {
		return err
	}
	if c.flags.out == formatJSON {
		return printJSON(c.stdout, l)
	}
	if l.Rate == 0 {
		fmt.Fprintf(c.stdout, "queue %s: no rate limit\n", l.Queue)
		return nil
	}
	fmt.Fprintf(c.stdout, "queue %s: %s attempts per second, bursts of %d\n", l.Queue, strconv.FormatFloat(l.Rate, 'f', -1, 64), l.Burst)
	return nil
}

// queueLimitText is a queue's rate limit in the queues table: "-" for
// none, else "R/s burst B (T tokens)".
func queueLimitText(q server.Queue) string {
	if q.Rate == 0 {
		return "-"
	}
	s := fmt.Sprintf("%s/s burst %d", strconv.FormatFloat(q.Rate, 'f', -1, 64), q.Burst)
	if q.Tokens != nil {
		s += fmt.Sprintf(" (%d tokens)", *q.Tokens)
	}
	return s
}

// queueLimitFlag is serve's repeatable --queue-rate-limit NAME=RATE[/BURST].
type queueLimitFlag map[string]runlog.Limit

func (f *queueLimitFlag) String() string { return "" }

func (f *queueLimitFlag) Set(s string) error {
	name, spec, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return fmt.Errorf("%q: want NAME=RATE or NAME=RATE/BURST, e.g. mail=100/10", s)
	}
	if name != runlog.DefaultQueue {
		if err := runlog.ValidQueueName(name); err != nil {
			return fmt.Errorf("%q: %v", s, err)
		}
	}
	l, err := parseLimit(spec)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if *f == nil {
		*f = make(queueLimitFlag)
	}
	if _, dup := (*f)[name]; dup {
		return fmt.Errorf("%q: queue %s has a limit already", s, name)
	}
	(*f)[name] = l
	return nil
}
