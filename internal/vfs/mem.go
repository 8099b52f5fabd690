package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	pebblevfs "github.com/cockroachdb/pebble/v2/vfs"
)

// Mem is an in-memory FS that models what a crash keeps. Each file keeps two
// versions of its bytes: the live ones every read sees, and the durable ones
// as of its last successful Sync. Each directory change (create, rename,
// remove) stays pending until SyncDir of its directory. CrashClone builds the
// filesystem a power cut would leave. Directories themselves are durable as
// soon as MkdirAll returns (a simplification: runlog creates its directory
// once).
//
// SetInjector installs an Injector that can fail any operation. Mem is safe
// for concurrent use.
type Mem struct {
	mu       sync.Mutex
	dirs     map[string]bool     // guarded by mu
	files    map[string]*memNode // live namespace; guarded by mu
	durable  map[string]*memNode // namespace as of the last SyncDirs; guarded by mu
	pending  []dirOp             // directory changes not yet durable, in order; guarded by mu
	locks    map[string]bool     // guarded by mu
	inject   Injector            // guarded by mu
	ops      int64               // guarded by mu
	injected int64               // guarded by mu
	capacity int64               // guarded by mu: bytes files may hold; 0 is no limit
	table    *pebblevfs.MemFS    // guarded by mu: see TableFS
}

// TableFS returns the in-memory filesystem, of pebble's kind, that goes
// with m: the embedded store keeps its job table there when its journal is
// on m, and CrashClone crashes it together with m.
func (m *Mem) TableFS() pebblevfs.FS {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.table == nil {
		m.table = pebblevfs.NewCrashableMem()
	}
	return m.table
}

var _ FS = (*Mem)(nil)

// memNode is one file (an inode).
type memNode struct {
	name    string // its current name, for operations on open files
	data    []byte // live bytes
	synced  []byte // durable bytes
	dirty   bool   // data may differ from synced at offsets >= dirtyFrom
	dirtyAt int
	modTime time.Time
}

func (n *memNode) markDirty(off int) {
	if !n.dirty || off < n.dirtyAt {
		n.dirtyAt = off
	}
	n.dirty = true
}

// sync makes the live bytes durable. Bytes forgotten by a failed sync stay
// as they were in synced (zeros if they never were durable).
func (n *memNode) sync() {
	d := len(n.data)
	if n.dirty {
		d = min(n.dirtyAt, len(n.data))
	}
	if d <= len(n.synced) {
		n.synced = append(n.synced[:d], n.data[d:]...)
	} else {
		n.synced = append(n.synced, make([]byte, d-len(n.synced))...)
		n.synced = append(n.synced, n.data[d:]...)
	}
	n.dirty = false
}

type dirOpKind int

const (
	dirCreate dirOpKind = iota
	dirRename
	dirRemove
)

// dirOp is a directory change waiting for SyncDir.
type dirOp struct {
	kind     dirOpKind
	dir      string // the directory whose SyncDir makes it durable
	old, new string
	node     *memNode
}

func (op dirOp) apply(ns map[string]*memNode) {
	switch op.kind {
	case dirCreate:
		ns[op.new] = op.node
	case dirRename:
		delete(ns, op.old)
		ns[op.new] = op.node
	case dirRemove:
		delete(ns, op.old)
	}
}

// NewMem returns an empty in-memory filesystem.
func NewMem() *Mem {
	return &Mem{
		dirs:    map[string]bool{},
		files:   map[string]*memNode{},
		durable: map[string]*memNode{},
		locks:   map[string]bool{},
	}
}

// SetInjector installs inj (nil removes it) and restarts the operation
// count, so Op.Index counts from 1 again.
func (m *Mem) SetInjector(inj Injector) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inject = inj
	m.ops = 0
	m.injected = 0
}

// SetCapacity makes m a disk of capacity bytes (0, the default, is no
// limit): the bytes of all files in the namespace may not exceed it. A
// write that would grow the files past it stores the bytes that fit and
// fails with syscall.ENOSPC ("no space left on device"), as a full disk
// does; a Truncate that would grow past it fails and changes nothing.
// Overwriting bytes a file already has needs no space, as on a real disk
// with blocks already allocated. A capacity below what the files already
// hold refuses every growth.
func (m *Mem) SetCapacity(capacity int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capacity = capacity
}

// Free returns how many bytes files may still grow by under the capacity
// set with SetCapacity, or -1 if there is no limit.
func (m *Mem) Free() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.capacity == 0 {
		return -1
	}
	return m.freeLocked()
}

// freeLocked returns the room left under the capacity (never negative).
// Called with mu held and a capacity set.
func (m *Mem) freeLocked() int64 {
	var used int64
	for _, n := range m.files {
		used += int64(len(n.data))
	}
	return max(m.capacity-used, 0)
}

// noSpace is the error of a write or truncate that found the disk full.
func noSpace(op, path string) error {
	return &fs.PathError{Op: op, Path: path, Err: syscall.ENOSPC}
}

// Ops returns how many operations ran since the last SetInjector (or since
// NewMem).
func (m *Mem) Ops() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// Injected returns how many operations the injector failed since the last
// SetInjector.
func (m *Mem) Injected() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.injected
}

// op counts one operation and asks the injector about it. Called with mu held.
func (m *Mem) op(kind OpKind, path string) error {
	m.ops++
	if m.inject == nil {
		return nil
	}
	if err := m.inject(Op{Kind: kind, Path: path, Index: m.ops}); err != nil {
		m.injected++
		return &fs.PathError{Op: kind.String(), Path: path, Err: err}
	}
	return nil
}

func clean(name string) string { return filepath.Clean(name) }

// dirExists reports whether dir exists. Called with mu held.
func (m *Mem) dirExists(dir string) bool {
	return dir == "." || dir == "/" || m.dirs[dir]
}

func notExist(op, path string) error {
	return &fs.PathError{Op: op, Path: path, Err: fs.ErrNotExist}
}

// Create implements FS.
func (m *Mem) Create(name string) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpCreate, name); err != nil {
		return nil, err
	}
	if m.dirs[name] {
		return nil, &fs.PathError{Op: "create", Path: name, Err: fs.ErrExist}
	}
	if n := m.files[name]; n != nil {
		n.data = n.data[:0]
		n.markDirty(0)
		n.modTime = time.Now()
		return &memFile{m: m, n: n, writable: true}, nil
	}
	dir := filepath.Dir(name)
	if !m.dirExists(dir) {
		return nil, notExist("create", name)
	}
	n := &memNode{name: name, modTime: time.Now()}
	m.files[name] = n
	m.pending = append(m.pending, dirOp{kind: dirCreate, dir: dir, new: name, node: n})
	return &memFile{m: m, n: n, writable: true}, nil
}

// Open implements FS.
func (m *Mem) Open(name string) (File, error) { return m.open(name, false) }

// OpenReadWrite implements FS.
func (m *Mem) OpenReadWrite(name string) (File, error) { return m.open(name, true) }

func (m *Mem) open(name string, writable bool) (File, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpOpen, name); err != nil {
		return nil, err
	}
	n := m.files[name]
	if n == nil {
		return nil, notExist("open", name)
	}
	return &memFile{m: m, n: n, writable: writable}, nil
}

// Remove implements FS.
func (m *Mem) Remove(name string) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpRemove, name); err != nil {
		return err
	}
	if m.files[name] == nil {
		return notExist("remove", name)
	}
	delete(m.files, name)
	m.pending = append(m.pending, dirOp{kind: dirRemove, dir: filepath.Dir(name), old: name})
	return nil
}

// Rename implements FS. The change becomes durable with SyncDir of the
// directory of newname.
func (m *Mem) Rename(oldname, newname string) error {
	oldname, newname = clean(oldname), clean(newname)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpRename, oldname); err != nil {
		return err
	}
	n := m.files[oldname]
	if n == nil {
		return &fs.PathError{Op: "rename", Path: oldname, Err: fs.ErrNotExist}
	}
	if !m.dirExists(filepath.Dir(newname)) {
		return notExist("rename", newname)
	}
	delete(m.files, oldname)
	m.files[newname] = n
	n.name = newname
	m.pending = append(m.pending, dirOp{kind: dirRename, dir: filepath.Dir(newname), old: oldname, new: newname, node: n})
	return nil
}

// MkdirAll implements FS.
func (m *Mem) MkdirAll(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpMkdir, dir); err != nil {
		return err
	}
	for d := dir; !m.dirExists(d); d = filepath.Dir(d) {
		if m.files[d] != nil {
			return &fs.PathError{Op: "mkdir", Path: d, Err: fs.ErrExist}
		}
		m.dirs[d] = true
	}
	return nil
}

// List implements FS.
func (m *Mem) List(dir string) ([]string, error) {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpList, dir); err != nil {
		return nil, err
	}
	if !m.dirExists(dir) {
		return nil, notExist("list", dir)
	}
	var names []string
	for p := range m.files {
		if filepath.Dir(p) == dir {
			names = append(names, filepath.Base(p))
		}
	}
	for p := range m.dirs {
		if filepath.Dir(p) == dir && p != dir {
			names = append(names, filepath.Base(p))
		}
	}
	slices.Sort(names)
	return names, nil
}

// Stat implements FS.
func (m *Mem) Stat(name string) (fs.FileInfo, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpStat, name); err != nil {
		return nil, err
	}
	if m.dirs[name] || name == "." || name == "/" {
		return memInfo{name: filepath.Base(name), dir: true}, nil
	}
	n := m.files[name]
	if n == nil {
		return nil, notExist("stat", name)
	}
	return memInfo{name: filepath.Base(name), size: int64(len(n.data)), mod: n.modTime}, nil
}

// Lock implements FS. Locks are held by the Mem, so a second Lock of the same
// name fails until the first is released.
func (m *Mem) Lock(name string) (io.Closer, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpLock, name); err != nil {
		return nil, err
	}
	if m.locks[name] {
		return nil, fmt.Errorf("%w: %s", ErrLocked, name)
	}
	if m.files[name] == nil {
		dir := filepath.Dir(name)
		if !m.dirExists(dir) {
			return nil, notExist("lock", name)
		}
		n := &memNode{name: name, modTime: time.Now()}
		m.files[name] = n
		m.pending = append(m.pending, dirOp{kind: dirCreate, dir: dir, new: name, node: n})
	}
	m.locks[name] = true
	return &memLock{m: m, name: name}, nil
}

type memLock struct {
	m    *Mem
	name string
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.m.mu.Lock()
		defer l.m.mu.Unlock()
		delete(l.m.locks, l.name)
	})
	return nil
}

// SyncDir implements FS: every pending change in dir becomes durable.
func (m *Mem) SyncDir(dir string) error {
	dir = clean(dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.op(OpSyncDir, dir); err != nil {
		return err
	}
	if !m.dirExists(dir) {
		return notExist("syncdir", dir)
	}
	kept := m.pending[:0]
	for _, op := range m.pending {
		if op.dir == dir {
			op.apply(m.durable)
		} else {
			kept = append(kept, op)
		}
	}
	clear(m.pending[len(kept):])
	m.pending = kept
	return nil
}

// CrashClone returns the filesystem a power cut would leave behind now: the
// durable directory entries and, in each file, the durable bytes. Locks and
// open files are not carried over, and the clone has no injector.
//
// With a nil rng nothing unsynced survives. With an rng the crash is
// crueller and more realistic: a random prefix of the pending directory
// changes is applied (the filesystem journals metadata in order), each
// 512-byte block of unsynced file data independently survives or not (so a
// file may end up with holes of zeros before surviving blocks), and an
// unsynced shrink of a file may or may not survive.
func (m *Mem) CrashClone(rng *rand.Rand) *Mem {
	m.mu.Lock()
	defer m.mu.Unlock()
	ns := make(map[string]*memNode, len(m.durable))
	for p, n := range m.durable {
		ns[p] = n
	}
	if rng != nil && len(m.pending) > 0 {
		for _, op := range m.pending[:rng.IntN(len(m.pending)+1)] {
			op.apply(ns)
		}
	}
	c := NewMem()
	if m.table != nil {
		cfg := pebblevfs.CrashCloneCfg{}
		if rng != nil {
			cfg = pebblevfs.CrashCloneCfg{UnsyncedDataPercent: rng.IntN(101), RNG: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
		}
		c.table = m.table.CrashClone(cfg)
	}
	for d := range m.dirs {
		c.dirs[d] = true
	}
	for p, n := range ns {
		data := crashBytes(n, rng)
		cn := &memNode{name: p, data: data, synced: slices.Clone(data), modTime: n.modTime}
		c.files[p] = cn
		c.durable[p] = cn
	}
	return c
}

const crashBlock = 512

// crashBytes returns what of n's bytes a crash keeps.
func crashBytes(n *memNode, rng *rand.Rand) []byte {
	out := slices.Clone(n.synced)
	if rng == nil || !n.dirty {
		return out
	}
	if len(n.data) < len(out) && rng.IntN(2) == 0 {
		out = out[:len(n.data)]
	}
	for off := n.dirtyAt - n.dirtyAt%crashBlock; off < len(n.data); off += crashBlock {
		if rng.IntN(2) == 0 {
			continue
		}
		lo, hi := max(off, n.dirtyAt), min(off+crashBlock, len(n.data))
		if len(out) < hi {
			out = append(out, make([]byte, hi-len(out))...)
		}
		copy(out[lo:hi], n.data[lo:hi])
	}
	return out
}

// ReadFile returns a copy of the live bytes of the named file. It is a test
// back door: it is not counted as an operation and never fails by injection.
func (m *Mem) ReadFile(name string) ([]byte, error) {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.files[name]
	if n == nil {
		return nil, notExist("readfile", name)
	}
	return slices.Clone(n.data), nil
}

// WriteFile replaces the bytes of the named file, creating it if needed, and
// makes bytes and directory entry durable at once, as file surgery on a
// closed, synced file would. It is a test back door: not counted, never
// failed by injection.
func (m *Mem) WriteFile(name string, data []byte) error {
	name = clean(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.dirExists(filepath.Dir(name)) {
		return notExist("writefile", name)
	}
	n := m.files[name]
	if n == nil {
		n = &memNode{name: name}
		m.files[name] = n
	}
	m.durable[name] = n
	n.data = slices.Clone(data)
	n.synced = slices.Clone(data)
	n.dirty = false
	n.modTime = time.Now()
	return nil
}

// memFile is an open file of a Mem. Operations on it are reported under
// the file's current name.
type memFile struct {
	m        *Mem
	n        *memNode
	pos      int64
	writable bool
	closed   bool
}

var _ File = (*memFile)(nil)

// check counts the operation and refuses it on a closed file. Called with mu
// held.
func (f *memFile) check(kind OpKind) error {
	if err := f.m.op(kind, f.n.name); err != nil {
		return err
	}
	if f.closed {
		return &fs.PathError{Op: kind.String(), Path: f.n.name, Err: fs.ErrClosed}
	}
	return nil
}

func (f *memFile) Read(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	if f.pos >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	k := copy(p, f.n.data[f.pos:])
	f.pos += int64(k)
	return k, nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpRead); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: f.n.name, Err: fs.ErrInvalid}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= int64(len(f.n.data)) {
		return 0, io.EOF
	}
	k := copy(p, f.n.data[off:])
	if k < len(p) {
		return k, io.EOF
	}
	return k, nil
}

func (f *memFile) Write(p []byte) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	k, err := f.writeAt(p, f.pos)
	f.pos += int64(k)
	return k, err
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	return f.writeAt(p, off)
}

// writeAt writes p at off; an injected failure writes half of p. Called with
// mu held.
func (f *memFile) writeAt(p []byte, off int64) (int, error) {
	err := f.check(OpWrite)
	switch {
	case err != nil && f.closed:
		return 0, err
	case !f.writable:
		return 0, &fs.PathError{Op: "write", Path: f.n.name, Err: fs.ErrPermission}
	case off < 0:
		return 0, &fs.PathError{Op: "write", Path: f.n.name, Err: fs.ErrInvalid}
	}
	q := p
	if err != nil {
		q = p[:len(p)/2]
	}
	if end := int(off) + len(q); f.m.capacity > 0 && end > len(f.n.data) {
		if limit := len(f.n.data) + int(f.m.freeLocked()); end > limit {
			q = q[:max(min(len(q), limit-int(off)), 0)]
			if err == nil {
				err = noSpace("write", f.n.name)
			}
			if len(q) == 0 {
				return 0, err
			}
		}
	}
	end, oldLen := int(off)+len(q), len(f.n.data)
	if end > oldLen {
		f.n.data = slices.Grow(f.n.data, end-oldLen)[:end]
		clear(f.n.data[oldLen:]) // a gap before off reads as zeros
	}
	copy(f.n.data[off:], q)
	f.n.markDirty(min(int(off), oldLen))
	f.n.modTime = time.Now()
	return len(q), err
}

func (f *memFile) Seek(offset int64, whence int) (int64, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpSeek); err != nil {
		return 0, err
	}
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = f.pos + offset
	case io.SeekEnd:
		abs = int64(len(f.n.data)) + offset
	default:
		return 0, &fs.PathError{Op: "seek", Path: f.n.name, Err: fs.ErrInvalid}
	}
	if abs < 0 {
		return 0, &fs.PathError{Op: "seek", Path: f.n.name, Err: fs.ErrInvalid}
	}
	f.pos = abs
	return abs, nil
}

func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpSync); err != nil {
		if !f.closed {
			// Like Linux after a failed writeback: the pages are marked
			// clean, so a later sync will not write them.
			f.n.dirty = false
		}
		return err
	}
	f.n.sync()
	return nil
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpTruncate); err != nil {
		return err
	}
	if !f.writable || size < 0 {
		return &fs.PathError{Op: "truncate", Path: f.n.name, Err: fs.ErrInvalid}
	}
	oldLen := len(f.n.data)
	if f.m.capacity > 0 && int(size) > oldLen && size-int64(oldLen) > f.m.freeLocked() {
		return noSpace("truncate", f.n.name)
	}
	if int(size) <= oldLen {
		f.n.data = f.n.data[:size]
	} else {
		f.n.data = append(f.n.data, make([]byte, int(size)-oldLen)...)
	}
	f.n.markDirty(min(int(size), oldLen))
	f.n.modTime = time.Now()
	return nil
}

func (f *memFile) Stat() (fs.FileInfo, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if err := f.check(OpStat); err != nil {
		return nil, err
	}
	return memInfo{name: filepath.Base(f.n.name), size: int64(len(f.n.data)), mod: f.n.modTime}, nil
}

// Close implements io.Closer; an injected failure still closes the file.
func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.n.name, Err: fs.ErrClosed}
	}
	err := f.m.op(OpClose, f.n.name)
	f.closed = true
	return err
}

// memInfo implements fs.FileInfo.
type memInfo struct {
	name string
	size int64
	mod  time.Time
	dir  bool
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) ModTime() time.Time { return i.mod }
func (i memInfo) IsDir() bool        { return i.dir }
func (i memInfo) Sys() any           { return nil }
func (i memInfo) Mode() fs.FileMode {
	if i.dir {
		return fs.ModeDir | 0o700
	}
	return 0o600
}
