package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// OS is the FS of the real operating system. Its zero value is ready to use.
type OS struct{}

var _ FS = OS{}

// osFile adds fdatasync to *os.File.
type osFile struct {
	*os.File
}

// Sync issues fdatasync(2): the data and the size are made durable, other
// metadata (such as the modification time) need not be.
func (f osFile) Sync() error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if serr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &fs.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

// Create implements FS.
func (OS) Create(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Open implements FS.
func (OS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// OpenReadWrite implements FS.
func (OS) OpenReadWrite(name string) (File, error) {
	f, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// List implements FS.
func (OS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (OS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// SyncDir implements FS.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	return errors.Join(serr, cerr)
}

// lockRetry is how long Lock keeps trying a lock that is held, and
// lockPoll how often. A lock this process has just released can still be
// held for a moment by a child it is starting: the child inherits the
// descriptor at fork and closes it (close-on-exec) only at exec, and an
// flock belongs to the open file description, which both share until
// then. A close followed by an Open of the same directory (or a test's
// reopen while another goroutine starts a process) must not fail on that.
// A real holder is reported after lockRetry.
const (
	lockRetry = time.Second
	lockPoll  = 5 * time.Millisecond
)

// Lock implements FS with flock(2) on a freshly opened descriptor. flock
// locks belong to the open file description, so a second Lock of the same
// file conflicts whether it comes from another process or from this one.
// A held lock is tried again for lockRetry before ErrLocked.
func (OS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var lerr error
	for end := time.Now().Add(lockRetry); ; {
		if err := rc.Control(func(fd uintptr) {
			for {
				lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
				if lerr != syscall.EINTR {
					return
				}
			}
		}); err != nil {
			f.Close()
			return nil, err
		}
		if lerr != syscall.EWOULDBLOCK || time.Now().After(end) {
			break
		}
		time.Sleep(lockPoll) // the holder may be a child of this process between fork and exec
	}
	if lerr != nil {
		f.Close()
		if errors.Is(lerr, syscall.EWOULDBLOCK) {
			abs, _ := filepath.Abs(name)
			return nil, fmt.Errorf("%w: %s", ErrLocked, abs)
		}
		return nil, &fs.PathError{Op: "flock", Path: name, Err: lerr}
	}
	return f, nil
}
