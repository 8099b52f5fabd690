package vfs

import (
	"errors"
	"fmt"
)

// OpKind names the kind of a filesystem operation, for error injection.
type OpKind int

// The operations Mem counts and can fail. Every call on Mem or on one of its
// files is exactly one operation.
const (
	OpCreate OpKind = iota + 1
	OpOpen
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpSeek
	OpStat
	OpClose
	OpRemove
	OpRename
	OpMkdir
	OpList
	OpLock
	OpSyncDir
)

var opNames = [...]string{
	OpCreate: "create", OpOpen: "open", OpRead: "read", OpWrite: "write",
	OpSync: "sync", OpTruncate: "truncate", OpSeek: "seek", OpStat: "stat",
	OpClose: "close", OpRemove: "remove", OpRename: "rename", OpMkdir: "mkdir",
	OpList: "list", OpLock: "lock", OpSyncDir: "syncdir",
}

// String returns the operation's lower-case name, such as "sync".
func (k OpKind) String() string {
	if k > 0 && int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("OpKind(%d)", int(k))
}

// Op describes one filesystem operation about to run on a Mem.
type Op struct {
	Kind OpKind
	// Path is the cleaned path the operation is about (for Rename, the old
	// name).
	Path string
	// Index is the 1-based number of this operation since the injector
	// was installed with SetInjector.
	Index int64
}

// An Injector decides, for each operation, whether it fails: a non-nil
// error fails the operation with that error (wrapped in an *fs.PathError).
// A failed write stores the first half of its bytes, as a real short write
// might; a failed Sync makes nothing durable and, like Linux after a failed
// writeback, forgets that the bytes were dirty, so a later Sync does not
// persist them either. Other failed operations change nothing.
type Injector func(Op) error

// ErrInjected is the error the ready-made injectors return.
var ErrInjected = errors.New("vfs: injected error")

// FailNth fails only the nth operation (1-based) with ErrInjected.
func FailNth(n int64) Injector {
	return func(op Op) error {
		if op.Index == n {
			return ErrInjected
		}
		return nil
	}
}

// FailFrom fails the nth operation and every one after it with ErrInjected:
// a disk that stays broken.
func FailFrom(n int64) Injector {
	return func(op Op) error {
		if op.Index >= n {
			return ErrInjected
		}
		return nil
	}
}

// FailIf fails every operation for which pred returns true with ErrInjected.
func FailIf(pred func(Op) bool) Injector {
	return func(op Op) error {
		if pred(op) {
			return ErrInjected
		}
		return nil
	}
}
