package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store/embedded"
	"github.com/runlog/runlog/internal/vfs"
	"github.com/runlog/runlog/retry"
)

// runBackup copies a data directory into DEST, consistently, whether a
// server runs on it or not:
//
//   - a server holds DIR (its lock is taken): the server makes the copy
//     (GET /v1/backup, with --server and --token), because only it can
//     coordinate the copy with its snapshots, segment drops and table
//     writes; the CLI checks the server's data directory is DIR;
//   - nothing holds DIR: the CLI opens it as the server would (repairing a
//     torn tail, requeueing attempts a crash interrupted) and makes the
//     same copy itself, holding the lock, so no server can start meanwhile.
//
// Either way the copy is written with each file synced, then checked as
// runlog journal verify does.
func runBackup(argv []string, stdout, stderr io.Writer) int {
	cf := clientFlags{}
	fs := newFlagSet("backup", "[flags] DIR DEST", stderr)
	fs.StringVar(&cf.server, "server", DefaultServer, "the `URL` of the server that holds DIR, if one runs")
	fs.StringVar(&cf.token, "token", "", "bearer `token` of that server (prefer RUNLOG_TOKEN)")
	fs.DurationVar(&cf.timeout, "request-timeout", 30*time.Second, "how long to wait for the server to start answering")
	pos, code, ok := parseOrExit(fs, argv, stderr)
	if !ok {
		return code
	}
	if err := (argSpec{names: []string{"DIR", "DEST"}}).check(pos); err != nil {
		return usageFail(fs, "backup", err, stderr)
	}
	dir, dest := pos[0], pos[1]
	fail := func(err error) int {
		fmt.Fprintf(stderr, "runlog backup: %v\n", err)
		return exitFailure
	}
	if err := checkDataDir(dir); err != nil {
		return fail(err)
	}
	if inside(dest, dir) {
		return fail(fmt.Errorf("%s is inside the data directory %s: put the copy elsewhere (another disk, ideally)", dest, dir))
	}
	_, statErr := os.Stat(dest)
	created := errors.Is(statErr, os.ErrNotExist)
	w, err := embedded.NewDirWriter(dest)
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	how := "directly (no server holds it)"
	s, err := embedded.Open(dir, embedded.Options{
		Journal: journal.Options{SegmentSize: runlog.DefaultSegmentSize},
		State:   state.Config{Circuit: retry.DefaultCircuit()},
		Now:     time.Now().UnixMilli(),
	})
	var seq uint64
	switch {
	case errors.Is(err, journal.ErrLocked):
		how = "by the server at " + cf.server + " (it holds the directory)"
		seq, err = backupOnline(ctx, &cf, dir, w)
		if err != nil {
			err = errors.New(explain(err, &cf))
		}
	case err != nil:
		err = fmt.Errorf("open %s: %w", dir, err)
	default:
		seq, err = s.Backup(w.Write)
		if cerr := s.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", dir, cerr)
		}
	}
	if err == nil {
		err = w.Finish()
	}
	if err != nil {
		removeCopy(dest, created)
		return fail(fmt.Errorf("%w (nothing was kept in %s)", err, dest))
	}
	rep, err := embedded.Verify(vfs.OS{}, dest, embedded.Options{State: state.Config{Circuit: retry.DefaultCircuit()}})
	if err == nil && rep.Journal.Torn != nil {
		err = fmt.Errorf("its journal ends in a torn write (%s): a copy never does", rep.Journal.Torn.Reason)
	}
	if err != nil {
		fmt.Fprintf(stderr, "runlog backup: the copy in %s does not verify: %v\n", dest, err)
		return exitCorrupt
	}
	fmt.Fprintf(stdout, "backed up %s to %s %s\njournal: records up to %d\njobs: %d (%d finished in the job table)\nverified: the copy opens (runlog journal verify %s)\n",
		dir, dest, how, seq, rep.Jobs, rep.TableJobs, dest)
	return exitOK
}

// backupOnline has the server that holds dir write its copy into w.
func backupOnline(ctx context.Context, cf *clientFlags, dir string, w *embedded.DirWriter) (uint64, error) {
	if err := checkServerURL(cf.server); err != nil {
		return 0, err
	}
	// No overall timeout: a large copy takes as long as it takes; the
	// server must start answering within --request-timeout.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = cf.timeout
	c := &server.Client{BaseURL: cf.server, Token: cf.token, HTTP: &http.Client{Transport: tr}}
	check := func(dataDir string) error {
		if dataDir == "" {
			return fmt.Errorf("the server at %s did not say which data directory it serves (a PostgreSQL server, or an older runlog): %s is held by another process", cf.server, dir)
		}
		a, err := os.Stat(dir)
		if err != nil {
			return err
		}
		b, err := os.Stat(dataDir)
		if err != nil || !os.SameFile(a, b) {
			return fmt.Errorf("the server at %s serves %s, not %s: give the --server (RUNLOG_SERVER) of the server that holds %s", cf.server, dataDir, dir, dir)
		}
		return nil
	}
	return c.Backup(ctx, check, w.Write)
}

// runRestore copies a backup into a new data directory, after checking it
// as runlog journal verify does; it refuses a DIR that holds anything.
func runRestore(argv []string, stdout, stderr io.Writer) int {
	fset := newFlagSet("restore", "BACKUP DIR", stderr)
	pos, code, ok := parseOrExit(fset, argv, stderr)
	if !ok {
		return code
	}
	if err := (argSpec{names: []string{"BACKUP", "DIR"}}).check(pos); err != nil {
		return usageFail(fset, "restore", err, stderr)
	}
	from, dir := pos[0], pos[1]
	fail := func(err error) int {
		fmt.Fprintf(stderr, "runlog restore: %v\n", err)
		return exitFailure
	}
	if err := checkDataDir(from); err != nil {
		return fail(err)
	}
	opts := embedded.Options{State: state.Config{Circuit: retry.DefaultCircuit()}}
	rep0, err := embedded.Verify(vfs.OS{}, from, opts)
	if err == nil && rep0.Journal.Torn != nil {
		err = fmt.Errorf("its journal ends in a torn write (%s), which a copy made by runlog backup never does: it was damaged, or is not a backup", rep0.Journal.Torn.Reason)
	}
	if err != nil {
		fmt.Fprintf(stderr, "runlog restore: the backup %s does not verify, nothing was restored: %v\n", from, err)
		return exitCorrupt
	}
	_, statErr := os.Stat(dir)
	created := errors.Is(statErr, os.ErrNotExist)
	w, err := embedded.NewDirWriter(dir)
	if err != nil {
		return fail(fmt.Errorf("%w (restore never writes over a data directory: stop the server, move DIR aside, restore into the emptied path)", err))
	}
	n := 0
	err = filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !embedded.BackupName(name) || !d.Type().IsRegular() {
			return nil // LOCK, MARK, leftovers: the copy needs none of them
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		n++
		return w.Write(name, fi.Size(), f)
	})
	if err == nil {
		err = w.Finish()
	}
	if err != nil {
		removeCopy(dir, created)
		return fail(fmt.Errorf("%w (nothing was kept in %s)", err, dir))
	}
	rep, err := embedded.Verify(vfs.OS{}, dir, opts)
	if err != nil {
		fmt.Fprintf(stderr, "runlog restore: the restored %s does not verify: %v\n", dir, err)
		return exitCorrupt
	}
	fmt.Fprintf(stdout, "restored %s into %s: %d files, journal up to record %d, %d jobs\nstart the server on it: runlog serve --data %s\n", from, dir, n, rep.Journal.LastSeq, rep.Jobs, dir)
	return exitOK
}

// checkDataDir returns an error unless dir is a directory that holds a
// journal (a segment file).
func checkDataDir(dir string) error {
	names, err := vfs.OS{}.List(dir)
	if err != nil {
		return fmt.Errorf("%s: %w: give a runlog data directory (the --data of runlog serve)", dir, err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".seg") {
			return nil
		}
	}
	return fmt.Errorf("%s holds no journal segment (*.seg): it is not a runlog data directory (the --data of runlog serve)", dir)
}

// inside reports whether path is dir or lies under it.
func inside(path, dir string) bool {
	p, err1 := filepath.Abs(path)
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil {
		return false
	}
	rel, err := filepath.Rel(d, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// removeCopy removes a copy that failed: the directory if the command
// created it, else what it wrote into the empty directory it was given.
func removeCopy(dir string, created bool) {
	if created {
		os.RemoveAll(dir)
		return
	}
	names, _ := vfs.OS{}.List(dir)
	for _, n := range names {
		os.RemoveAll(filepath.Join(dir, n))
	}
}
