package embedded

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// DirWriter writes the files of a backup (what Store.Backup emits) into a
// directory, durably: each file is synced, and Finish syncs the
// directories. It never overwrites anything: the directory must be empty or
// not exist, and every file is created anew.
type DirWriter struct {
	dir  string
	dirs []string // directories created, to sync at Finish
}

// NewDirWriter returns a writer into dir, which it creates if missing. It
// refuses a dir that holds anything: a copy must not mix with other files
// (or with an older copy).
func NewDirWriter(dir string) (*DirWriter, error) {
	if err := EmptyDir(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return &DirWriter{dir: dir, dirs: []string{dir, filepath.Dir(filepath.Clean(dir))}}, nil
}

// EmptyDir returns nil if dir does not exist or is an empty directory, and
// an error that says what to do otherwise.
func EmptyDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is a file, not a directory: give a new or empty directory", dir)
	}
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if len(names) > 0 {
		return fmt.Errorf("%s is not empty (it holds %s): give a new or empty directory; nothing is overwritten", dir, names[0])
	}
	return nil
}

// Write creates the file name (slash-separated, relative to the
// directory; BackupName must accept it) with exactly size bytes of r, and
// syncs it.
func (w *DirWriter) Write(name string, size int64, r io.Reader) error {
	if !BackupName(name) {
		return fmt.Errorf("refused file %q: a backup holds only snapshots, journal segments and table/ files", name)
	}
	path := filepath.Join(w.dir, filepath.FromSlash(name))
	if sub := filepath.Dir(path); sub != w.dir {
		if _, err := os.Stat(sub); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(sub, 0o700); err != nil {
				return err
			}
			for d := sub; d != w.dir && strings.HasPrefix(d, w.dir); d = filepath.Dir(d) {
				w.dirs = append(w.dirs, d)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s: got %d bytes of %d: the copy was cut short", name, n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Finish makes the directory entries durable.
func (w *DirWriter) Finish() error {
	for i := len(w.dirs) - 1; i >= 0; i-- {
		d, err := os.Open(w.dirs[i])
		if err != nil {
			return err
		}
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", w.dirs[i], err)
		}
	}
	return nil
}
