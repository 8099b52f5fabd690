package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Ledger is a file of job ids, one "id\n" line each, appended with
// O_APPEND by the worker process. Written before the kernel's page cache,
// it survives a kill -9 of the writer, so it is the outside record of which
// job bodies started and which finished.
type Ledger struct {
	f *os.File
}

// OpenLedger opens (creating) the ledger at path for appending.
func OpenLedger(path string) (*Ledger, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open ledger: %w", err)
	}
	return &Ledger{f: f}, nil
}

// Append records id with a single write(2), atomic under O_APPEND.
func (l *Ledger) Append(id int64) error {
	var buf [24]byte
	b := strconv.AppendInt(buf[:0], id, 10)
	b = append(b, '\n')
	_, err := l.f.Write(b)
	return err
}

// Close closes the ledger file.
func (l *Ledger) Close() error { return l.f.Close() }

// LedgerReader reads the ids appended to a ledger since its last call.
type LedgerReader struct {
	path    string
	off     int64
	partial []byte
}

// NewLedgerReader reads the ledger at path from its beginning; the file
// need not exist yet.
func NewLedgerReader(path string) *LedgerReader { return &LedgerReader{path: path} }

// Next returns the ids of the complete lines appended since the last call.
func (r *LedgerReader) Next() ([]int64, error) {
	f, err := os.Open(r.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(r.off, io.SeekStart); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	r.off += int64(len(data))
	data = append(r.partial, data...)
	cut := bytes.LastIndexByte(data, '\n')
	if cut < 0 {
		r.partial = data
		return nil, nil
	}
	r.partial = bytes.Clone(data[cut+1:])
	return ParseLedger(data[:cut+1])
}

// ParseLedger parses complete "id\n" lines.
func ParseLedger(data []byte) ([]int64, error) {
	var ids []int64
	for len(data) > 0 {
		line, rest, ok := bytes.Cut(data, []byte{'\n'})
		if !ok {
			return ids, fmt.Errorf("harness: ledger line %q has no newline", line)
		}
		id, err := strconv.ParseInt(string(line), 10, 64)
		if err != nil {
			return ids, fmt.Errorf("harness: bad ledger line %q: %w", line, err)
		}
		ids = append(ids, id)
		data = rest
	}
	return ids, nil
}

// CrashWorkerParams configures one worker process of workload W4.
type CrashWorkerParams struct {
	// Enqueue is the number of jobs to enqueue before starting the
	// workers (0 in the restarted process).
	Enqueue int
	// Concurrency is the number of enqueuing goroutines when the system
	// has no batch enqueue.
	Concurrency int
	// BatchSize is the enqueue's batch size where the system has one.
	BatchSize int
	// Body is how long each job body takes, so that jobs are in flight
	// when the process is killed.
	Body time.Duration
	// StartLedger and DoneLedger record the bodies started and finished.
	StartLedger, DoneLedger string
}

// RunCrashWorker is the body of a W4 worker process: it enqueues the jobs
// if asked, then runs them, appending each id to the start ledger before
// the body and to the done ledger after it, until ctx ends (the parent
// kills it with SIGKILL, or stops it at the end).
func RunCrashWorker(ctx context.Context, d Driver, p CrashWorkerParams) error {
	started, err := OpenLedger(p.StartLedger)
	if err != nil {
		return err
	}
	defer started.Close()
	done, err := OpenLedger(p.DoneLedger)
	if err != nil {
		return err
	}
	defer done.Close()
	if p.Enqueue > 0 {
		if _, err := enqueueBatched(ctx, d, 0, int64(p.Enqueue), p.BatchSize); errors.Is(err, ErrNoBatch) {
			if _, err := enqueueAll(ctx, d, 0, int64(p.Enqueue), p.Concurrency); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	var ledgerErr atomic.Pointer[error]
	h := func(ctx context.Context, pl Payload) error {
		if err := started.Append(pl.ID); err != nil {
			ledgerErr.CompareAndSwap(nil, &err)
			return err
		}
		if p.Body > 0 {
			t := time.NewTimer(p.Body)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if err := done.Append(pl.ID); err != nil {
			ledgerErr.CompareAndSwap(nil, &err)
			return err
		}
		return nil
	}
	if err := d.Start(ctx, h); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	<-ctx.Done()
	if e := ledgerErr.Load(); e != nil {
		return fmt.Errorf("ledger append: %w", *e)
	}
	return nil
}

// CrashParams configures the parent side of workload W4.
type CrashParams struct {
	// N is the number of jobs the first worker enqueues.
	N int
	// KillAfter is how many done-ledger lines the parent waits for before
	// it kills the first worker with SIGKILL.
	KillAfter int
	// Limit bounds the wait for KillAfter.
	Limit time.Duration
	// Window is how long the parent watches the restarted worker.
	Window time.Duration
	// Body is how long each job body takes (the workers are told by
	// Spawn); the kill comes half a body after KillAfter jobs are done
	// and bodies are seen in flight.
	Body time.Duration
	// StartLedger and DoneLedger are the worker's ledgers.
	StartLedger, DoneLedger string
	// Spawn starts a worker process; first is true for the one that
	// enqueues.
	Spawn func(first bool) (*exec.Cmd, error)
}

// RunCrash runs W4: it starts the first worker, kills it with SIGKILL once
// KillAfter jobs are done and others are in flight, restarts it, and watches the done ledger until
// every job ran or the window passes. It fills r's W4 fields and the peak
// RSS of the two worker processes.
func RunCrash(ctx context.Context, p CrashParams, r *Result) error {
	begin := time.Now()
	defer func() { r.WallSeconds = time.Since(begin).Seconds() }()
	r.N = p.N
	r.WindowSeconds = p.Window.Seconds()
	r.BodyMillis = float64(p.Body) / float64(time.Millisecond)
	r.RecoverSeconds, r.AllDoneSeconds = -1, -1

	first, err := p.Spawn(true)
	if err != nil {
		return fmt.Errorf("start the first worker: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- first.Wait() }()
	doneR := NewLedgerReader(p.DoneLedger)
	startR := NewLedgerReader(p.StartLedger)
	var done []int64
	started := 0
	deadline := time.Now().Add(p.Limit)
	// Kill once KillAfter jobs are done and some bodies are in flight
	// (systems that dispatch in waves may be between two), half a body
	// after that was seen.
	for len(done) < p.KillAfter || started <= len(done) {
		select {
		case err := <-exited:
			return fmt.Errorf("the first worker exited before the kill (after %d jobs): %v", len(done), err)
		case <-ctx.Done():
			_ = first.Process.Kill()
			<-exited
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		// Starts first, then finishes: started > done then means a body
		// was truly in flight at some instant between the two reads.
		ids, err := startR.Next()
		if err != nil {
			return err
		}
		started += len(ids)
		if ids, err = doneR.Next(); err != nil {
			return err
		}
		done = append(done, ids...)
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			<-exited
			return fmt.Errorf("only %d of %d jobs done (%d started) within %s, before the kill", len(done), p.KillAfter, started, p.Limit)
		}
	}
	time.Sleep(p.Body / 2)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 the first worker: %w", err)
	}
	<-exited
	r.MaxRSSKiB = MaxRSSKiB(first.ProcessState)

	// Everything the dead process wrote is in the ledgers now.
	ids, err := doneR.Next()
	if err != nil {
		return err
	}
	done = append(done, ids...)
	startedIDs, err := NewLedgerReader(p.StartLedger).Next()
	if err != nil {
		return err
	}
	finished := make(map[int64]bool, len(done))
	for _, id := range done {
		finished[id] = true
	}
	// startedBefore holds every job whose body started before the kill:
	// the ones whose body had not finished must run again, and the ones
	// that finished may run again if the system had not recorded it.
	startedBefore := make(map[int64]bool, len(startedIDs))
	unfinished := map[int64]bool{}
	for _, id := range startedIDs {
		startedBefore[id] = true
		if !finished[id] {
			unfinished[id] = true
		}
	}
	r.Interrupted = len(unfinished)
	r.Notes = append(r.Notes, fmt.Sprintf("killed after %d of %d jobs were done", len(finished), p.N))

	restart := time.Now()
	second, err := p.Spawn(false)
	if err != nil {
		return fmt.Errorf("restart the worker: %w", err)
	}
	exited2 := make(chan error, 1)
	go func() { exited2 <- second.Wait() }()
	var lastRerun time.Duration // of a job started before the kill
	windowEnd := restart.Add(p.Window)
	var werr error
watch:
	for len(finished) < p.N && time.Now().Before(windowEnd) {
		select {
		case err := <-exited2:
			werr = fmt.Errorf("the restarted worker exited: %v", err)
			exited2 <- err
			break watch
		case <-ctx.Done():
			werr = ctx.Err()
			break watch
		case <-time.After(2 * time.Millisecond):
		}
		ids, err := doneR.Next()
		if err != nil {
			werr = err
			break
		}
		now := time.Since(restart)
		for _, id := range ids {
			done = append(done, id)
			if startedBefore[id] {
				lastRerun = now
				delete(unfinished, id)
			}
			finished[id] = true
		}
	}
	if len(finished) >= p.N {
		r.AllDoneSeconds = time.Since(restart).Seconds()
	}
	if len(unfinished) == 0 {
		r.RecoverSeconds = lastRerun.Seconds()
	} else {
		r.Notes = append(r.Notes, fmt.Sprintf("%d jobs in flight at the kill had not run again %s after the restart", len(unfinished), p.Window))
	}
	_ = second.Process.Signal(syscall.SIGKILL)
	<-exited2
	r.MaxRSSKiB = max(r.MaxRSSKiB, MaxRSSKiB(second.ProcessState))
	// A last read: completions that landed between the last poll and the kill.
	if ids, err := doneR.Next(); err == nil {
		done = append(done, ids...)
	}
	c := CountLedger(p.N, done)
	r.Lost, r.Twice = c.Lost, c.Twice
	if c.Unknown > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d ledger lines named no job of the run", c.Unknown))
	}
	return werr
}

// MaxRSSKiB returns the peak resident set of an exited process in KiB
// (Linux reports ru_maxrss in KiB), or 0 when unknown.
func MaxRSSKiB(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}
