package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

func runJournal(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "runlog journal: missing the command\n\n%s", journalUsage)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, journalUsage)
		return exitOK
	case "verify":
		return runJournalVerify(args[1:], stdout, stderr)
	case "dump":
		return runJournalDump(args[1:], stdout, stderr)
	case "state":
		return runJournalState(args[1:], stdout, stderr)
	case "snapshot":
		return runJournalSnapshot(args[1:], stdout, stderr)
	case "compact":
		// The old name of the same act: it keeps working (scripts and
		// runbooks use it), and says the new one.
		fmt.Fprintln(stderr, "runlog journal: \"compact\" is the old name of \"snapshot\"; it runs runlog journal snapshot DIR")
		return runJournalSnapshot(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "runlog journal: unknown command %q\n\n%s", args[0], journalUsage)
		return exitUsage
	}
}

// journalUsage is the usage of runlog journal.
const journalUsage = `Usage: runlog journal COMMAND DIR [flags]

Commands (DIR is a data directory, the --data of runlog serve):
  verify DIR            check it as opening it would, changing nothing (exit 0 ok, 2 torn tail, 3 corrupt)
  dump DIR              print its snapshots and one line per journal record
  state DIR [--at SEQ]  rebuild and print the state right after record SEQ (default: the last)
  snapshot DIR          write a snapshot and drop the segments it covers (the server must be stopped)

Run 'runlog journal COMMAND -h' for a command's flags.
`

// journalDir parses the single DIR argument of a journal command.
func journalDir(name string, args []string, stderr io.Writer) (string, int, bool) {
	fs := newFlagSet("journal "+name, "DIR", stderr)
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return "", code, false
	}
	if err := (argSpec{names: []string{"DIR"}}).check(pos); err != nil {
		return "", usageFail(fs, "journal "+name, err, stderr), false
	}
	return pos[0], exitOK, true
}

// runJournalVerify checks a data directory as opening it does (the same
// check: embedded.Verify), without changing it. Exit 0: clean; 2: a torn
// tail that opening the directory repairs; 3: damage that opening refuses
// (what is wrong and what to do are printed); 1: the directory could not
// be read.
func runJournalVerify(args []string, stdout, stderr io.Writer) int {
	dir, code, ok := journalDir("verify", args, stderr)
	if !ok {
		return code
	}
	rep, err := embedded.Verify(vfs.OS{}, dir, embedded.Options{State: state.Config{Circuit: retry.DefaultCircuit()}})
	switch {
	case errors.Is(err, journal.ErrCorrupt) || errors.Is(err, snapshot.ErrCorrupt):
		fmt.Fprintf(stdout, "corrupt: %v\n", err)
		var ce *journal.CorruptError
		if errors.As(err, &ce) {
			fmt.Fprintf(stdout, "file: %s\noffset: %d\n", ce.File, ce.Offset)
		}
		fmt.Fprintln(stdout, "the server refuses to open this directory: restore it from a backup (or move the damaged files aside knowing the jobs they held are lost)")
		return exitCorrupt
	case err != nil:
		fmt.Fprintf(stderr, "runlog journal verify: %v\n", err)
		return exitFailure
	}
	j := rep.Journal
	fmt.Fprintf(stdout, "segments: %d\nrecords: %d\n", j.Segments, j.Records)
	if j.Records > 0 {
		fmt.Fprintf(stdout, "seq: %d..%d\n", j.FirstSeq, j.LastSeq)
	}
	if rep.Snapshot.Path != "" {
		fmt.Fprintf(stdout, "snapshot: %s (covers records up to %d)\n", rep.Snapshot.Path, rep.Snapshot.Seq)
	}
	fmt.Fprintf(stdout, "jobs: %d\n", rep.Jobs)
	if rep.TableInUse {
		fmt.Fprintln(stdout, "job table: in use by a running server, not read (stop it to check the table)")
	} else {
		fmt.Fprintf(stdout, "job table: %d finished jobs read, every block's checksum checked\n", rep.TableJobs)
	}
	for _, d := range rep.Damaged {
		fmt.Fprintf(stdout, "warning: damaged snapshot not used (an older state plus the journal is used instead, so nothing is lost): %v\n", d)
	}
	if t := j.Torn; t != nil {
		fmt.Fprintf(stdout, "torn tail: %s at offset %d: %d bytes of an unfinished write (%s)\n", t.File, t.Offset, t.Bytes, t.Reason)
		fmt.Fprintln(stdout, "repairable: opening the journal (runlog serve, or runlog.Open) cuts these bytes off, keeping a .broken copy; no acknowledged record is lost")
		return exitTorn
	}
	fmt.Fprintln(stdout, "ok")
	return exitOK
}

// runJournalDump prints one line per record: seq, segment, offset and the op
// decoded as text.
func runJournalDump(args []string, stdout, stderr io.Writer) int {
	dir, code, ok := journalDir("dump", args, stderr)
	if !ok {
		return code
	}
	w := bufio.NewWriter(stdout)
	dumpSnapshots(w, dir)
	err := journal.Scan(vfs.OS{}, dir, journal.Options{}, func(pos journal.Position, rec []byte) error {
		fmt.Fprintf(w, "seq=%d segment=%d offset=%d %s\n", pos.Seq, pos.Segment, pos.Offset, formatRecord(rec))
		return nil
	})
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal dump: %v\n", err)
		if errors.Is(err, journal.ErrCorrupt) {
			return exitCorrupt
		}
		return exitFailure
	}
	return exitOK
}

// formatRecord decodes a record into "op=KIND id=N ..." with only the fields
// the op uses.
func formatRecord(rec []byte) string {
	op, err := state.Decode(rec)
	if err != nil {
		return fmt.Sprintf("undecodable (%d bytes): %v", len(rec), err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "op=%s id=%d at=%s", op.Kind, op.ID, msTime(op.At))
	if op.Due != 0 {
		fmt.Fprintf(&b, " due=%s", msTime(op.Due))
	}
	if op.Attempt != 0 {
		fmt.Fprintf(&b, " attempt=%d", op.Attempt)
	}
	if sp := op.Spec; sp != nil {
		fmt.Fprintf(&b, " kind=%s target=%s", strconv.Quote(sp.Kind), strconv.Quote(sp.Target))
		if sp.Key != "" {
			fmt.Fprintf(&b, " key=%s", strconv.Quote(sp.Key))
		}
		fmt.Fprintf(&b, " policy=%+v", sp.Policy)
		if sp.TimeoutMS != 0 {
			fmt.Fprintf(&b, " timeout=%v", time.Duration(sp.TimeoutMS)*time.Millisecond)
		}
		formatSpecExt(&b, sp)
		fmt.Fprintf(&b, " payload=%s", quoteMax(sp.Payload, 200))
		if sp.Schedule != "" {
			fmt.Fprintf(&b, " schedule=%s tick=%s", strconv.Quote(sp.Schedule), msTime(sp.Tick))
		}
	}
	if c := op.Sched; c != nil {
		fmt.Fprintf(&b, " schedule=%s action=%s", strconv.Quote(c.Name), c.Action)
		if d := c.Def; d != nil {
			fmt.Fprintf(&b, " cron=%s every=%v zone=%s overlap=%s catch_up=%s job_kind=%s", strconv.Quote(d.Cron),
				time.Duration(d.EveryMS)*time.Millisecond, strconv.Quote(d.Zone), d.Overlap, d.CatchUp, strconv.Quote(d.Job.Kind))
		}
		if c.Tick != 0 {
			fmt.Fprintf(&b, " tick=%s", msTime(c.Tick))
		}
	}
	if c := op.Life; c != nil {
		fmt.Fprintf(&b, " target=%s disable=%t", strconv.Quote(c.Target), c.Disable)
		if c.Reason != "" {
			fmt.Fprintf(&b, " reason=%s", strconv.Quote(c.Reason))
		}
	}
	if op.Class != 0 {
		fmt.Fprintf(&b, " class=%s breaker_failed=%t", op.Class, op.BreakerFailed)
	}
	if op.Error != "" {
		fmt.Fprintf(&b, " error=%s", strconv.Quote(op.Error))
	}
	if len(op.Output) > 0 {
		fmt.Fprintf(&b, " output=%s", quoteMax(op.Output, 200))
	}
	return b.String()
}

func msTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// quoteMax quotes the first n bytes of b, noting how many more there were.
func quoteMax(b []byte, n int) string {
	if len(b) <= n {
		return strconv.Quote(string(b))
	}
	return fmt.Sprintf("%s...(+%d bytes)", strconv.Quote(string(b[:n])), len(b)-n)
}

// formatSpecExt writes the spec's extension fields that are set.
func formatSpecExt(b *strings.Builder, sp *state.Spec) {
	if sp.Queue != "" {
		fmt.Fprintf(b, " queue=%s", strconv.Quote(sp.Queue))
	}
	if sp.Priority != 0 {
		fmt.Fprintf(b, " priority=%d", sp.Priority)
	}
	if sp.Schedule != "" {
		fmt.Fprintf(b, " schedule=%s tick=%s", strconv.Quote(sp.Schedule), msTime(sp.Tick))
	}
	for _, m := range sp.Metadata {
		fmt.Fprintf(b, " metadata.%s=%s", m.Key, strconv.Quote(m.Value))
	}
}
