package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// dumpSnapshots prints one line per snapshot file of dir, newest first:
// the record it covers, its size and job count, or why it is damaged.
func dumpSnapshots(w io.Writer, dir string) {
	infos, err := snapshot.List(vfs.OS{}, dir)
	if err != nil {
		fmt.Fprintf(w, "snapshots: %v\n", err)
		return
	}
	for _, in := range infos {
		// Streamed, as Open loads one: never the body and its state in
		// memory at once.
		body, err := snapshot.OpenBody(vfs.OS{}, in.Path)
		if err == nil {
			var st *state.State
			st, err = state.FromSnapshotReader(state.Config{Circuit: retry.DefaultCircuit()}, body, body.Size)
			body.Close()
			if err == nil {
				c := st.Counts()
				fmt.Fprintf(w, "snapshot covers=%d file=%s bytes=%d jobs=%d held=%d pending=%d running=%d succeeded=%d failed=%d cancelled=%d next-id=%d\n",
					body.Seq, filepath.Base(in.Path), body.Size, c.Total(), st.Len(), c.Pending, c.Running, c.Succeeded, c.Failed, c.Cancelled, st.NextID())
				continue
			}
		}
		fmt.Fprintf(w, "snapshot covers=%d file=%s DAMAGED: %v\n", in.Seq, filepath.Base(in.Path), err)
	}
}

// runJournalState rebuilds the state as it was right after record --at (the
// last one by default) from the newest intact snapshot at or before it plus
// the journal, read-only, and prints it: counts, breakers, one line per job.
func runJournalState(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("journal state", "DIR [--at SEQ]", stderr)
	at := fs.Uint64("at", 0, "rebuild the state right after the record of this `SEQ`uence number (as runlog journal dump shows it); 0 means the last record")
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if err := (argSpec{names: []string{"DIR"}}).check(pos); err != nil {
		return usageFail(fs, "journal state", err, stderr)
	}
	// Breakers are rebuilt with the default breaker settings: the journal
	// does not record the settings a server ran with.
	st, last, err := embedded.StateAt(vfs.OS{}, pos[0], state.Config{Circuit: retry.DefaultCircuit()}, journal.Options{}, *at)
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal state: %v\n", err)
		if errors.Is(err, journal.ErrCorrupt) {
			return exitCorrupt
		}
		return exitFailure
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	c := st.Counts()
	fmt.Fprintf(w, "state at record %d: jobs=%d pending=%d running=%d succeeded=%d failed=%d cancelled=%d next-id=%d\n",
		last, c.Total(), c.Pending, c.Running, c.Succeeded, c.Failed, c.Cancelled, st.NextID())
	if held := st.Len(); held < c.Total() {
		fmt.Fprintf(w, "(%d finished jobs had moved to the job table by then, which keeps only the present: the lines below are the %d jobs the journal and snapshot hold; runlog jobs lists the others)\n", c.Total()-held, held)
	}
	st.Targets(func(target string, b retry.Breaker) bool {
		fmt.Fprintf(w, "breaker target=%q state=%s failures=%d", target, b.State, len(b.Fails))
		if b.State == retry.Open {
			fmt.Fprintf(w, " until=%s", msTime(b.Until))
		}
		if b.State == retry.HalfOpen {
			fmt.Fprintf(w, " probes=%d", b.Busy)
		}
		fmt.Fprintln(w)
		return true
	})
	st.Scan(0, false, func(j *state.Job) bool {
		fmt.Fprintf(w, "job id=%d state=%s kind=%q target=%q attempts=%d fails=%d", j.ID, j.State, j.Spec.Kind, j.Spec.Target, j.Started(), j.Fails())
		if j.Spec.Key != "" {
			fmt.Fprintf(w, " key=%q", j.Spec.Key)
		}
		if j.State == state.Pending {
			fmt.Fprintf(w, " due=%s", msTime(j.Due))
		}
		if j.Reason() != "" {
			fmt.Fprintf(w, " reason=%q", j.Reason())
		}
		fmt.Fprintln(w)
		return true
	})
	return exitOK
}

// runJournalSnapshot opens the journal (it must not be in use: the lock
// says so), writes a snapshot of its state and drops the segments the
// snapshot covers, as Runner.Snapshot does on a running one, then prints
// the disk use before and after.
func runJournalSnapshot(args []string, stdout, stderr io.Writer) int {
	dir, code, ok := journalDir("snapshot", args, stderr)
	if !ok {
		return code
	}
	before, err := dirBytes(dir)
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal snapshot: %v\n", err)
		return exitFailure
	}
	s, err := embedded.Open(dir, embedded.Options{
		// The server's segment size: the segment started here (and
		// preallocated) stays the size the server uses.
		Journal: journal.Options{SegmentSize: runlog.DefaultSegmentSize},
		State:   state.Config{Circuit: retry.DefaultCircuit()},
		Now:     time.Now().UnixMilli(),
	})
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal snapshot: %v\n", err)
		return exitFailure
	}
	ck, err := s.Snapshot()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal snapshot: %v\n", err)
		return exitFailure
	}
	after, err := dirBytes(dir)
	if err != nil {
		fmt.Fprintf(stderr, "runlog journal snapshot: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "snapshot covers record %d: %d jobs, %d bytes\ndisk: %d bytes before, %d after\n", ck.Seq, ck.Jobs, ck.Bytes, before, after)
	return exitOK
}

// dirBytes sums the sizes of the files directly in dir.
func dirBytes(dir string) (int64, error) {
	names, err := vfs.OS{}.List(dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, name := range names {
		fi, err := vfs.OS{}.Stat(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		n += fi.Size()
	}
	return n, nil
}
