// Package snapshot stores snapshots of the engine's durable state next to
// its journal, so that opening replays only the journal after the newest
// snapshot, and old journal segments can be dropped.
//
// # Format
//
// A snapshot is one file, named snap-<seq>.snap where <seq> (20 decimal
// digits) is the journal sequence number of the last record it covers:
//
//	+----------+---------+---------+----------+------------+--------+---------+
//	| magic    | version | flags   | seq      | body len   | body   | crc32c  |
//	| 8 bytes  | u32 LE  | u32 LE  | u64 LE   | u64 LE     | n bytes| u32 LE  |
//	| RLSNAP01 | 1       | 0       | covers   | n          |        | of all  |
//	+----------+---------+---------+----------+------------+--------+---------+
//
// The CRC-32C (Castagnoli) covers every byte before it. The body is opaque
// here (package state encodes it). The magic, the header layout and the
// checksum must never change; a new body encoding takes a new version.
//
// # Atomicity
//
// Write (or a Writer, which streams) creates snap-<seq>.snap.tmp, writes and
// syncs it, renames it to its final name and syncs the directory: a crash at any step leaves either no
// new snapshot (a stray .tmp, which Load never reads and Clean removes) or a
// complete one. A snapshot whose checksum or length does not match is never
// used: Load falls back to the next older one and reports the damaged ones.
package snapshot

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/runlog/runlog/internal/vfs"
)

// Version is the format version this package writes.
const Version = 1

const (
	magic      = "RLSNAP01"
	headerSize = 8 + 4 + 4 + 8 + 8
	crcSize    = 4
	prefix     = "snap-"
	suffix     = ".snap"
	tmpSuffix  = ".tmp"
	// maxBody bounds the body a reader accepts (a corrupt length field
	// must not make it allocate without limit).
	maxBody = 64 << 30
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by errors about a damaged snapshot file.
var ErrCorrupt = errors.New("snapshot: corrupt")

// Info names one snapshot file.
type Info struct {
	Seq  uint64 // the last journal record it covers
	Path string
}

// Name returns the file name of the snapshot covering seq.
func Name(seq uint64) string { return fmt.Sprintf("%s%020d%s", prefix, seq, suffix) }

// Encode returns the bytes of a snapshot covering seq with the given body.
func Encode(seq uint64, body []byte) []byte {
	b := append(make([]byte, 0, headerSize+len(body)+crcSize), header(seq, uint64(len(body)))...)
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// Decode checks the bytes of a snapshot file and returns what it covers and
// its body (a sub-slice of b).
func Decode(b []byte) (seq uint64, body []byte, err error) {
	if len(b) < headerSize+crcSize {
		return 0, nil, fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorrupt, len(b))
	}
	if string(b[:8]) != magic {
		return 0, nil, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:8])
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != Version {
		return 0, nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, v, Version)
	}
	n := binary.LittleEndian.Uint64(b[24:])
	if n > maxBody || uint64(len(b)) != headerSize+n+crcSize {
		return 0, nil, fmt.Errorf("%w: body length %d does not match the file size %d", ErrCorrupt, n, len(b))
	}
	end := headerSize + int(n)
	if got, want := crc32.Checksum(b[:end], crcTable), binary.LittleEndian.Uint32(b[end:]); got != want {
		return 0, nil, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return binary.LittleEndian.Uint64(b[16:]), b[headerSize:end], nil
}

// Write stores a snapshot covering seq in dir atomically (see the package
// doc) and returns its path. It is Create, one Write of body, and Commit.
func Write(fsys vfs.FS, dir string, seq uint64, body []byte) (string, error) {
	w, err := Create(fsys, dir, seq)
	if err != nil {
		return "", err
	}
	if _, err := w.Write(body); err != nil {
		w.Abort()
		return "", err
	}
	return w.Commit()
}

// SyncEvery is how many body bytes a Writer writes between two syncs of the
// file. Syncing as it goes, rather than once at the end, bounds how much
// data the device has queued at any time: a journal sync issued while a
// snapshot of hundreds of megabytes is written waits behind at most this
// much of it, not behind all of it (pebble's and RocksDB's bytes_per_sync,
// for the same reason).
const SyncEvery = 1 << 20

// Writer streams one snapshot to disk, so that a large state is never
// encoded into memory whole: Create, Write the body in pieces, then Commit
// (or Abort). The body's length is not known in advance: the header is
// written last, in place, and the checksum of header and body is combined
// from the two parts' checksums.
type Writer struct {
	fsys       vfs.FS
	dir        string
	tmp, final string
	seq        uint64
	f          vfs.File
	crc        uint32 // of the body so far
	n          uint64 // body bytes written
	unsynced   int    // body bytes since the last sync
	err        error  // sticky: the first failure
}

// Create starts a snapshot covering journal record seq in dir, as a
// temporary file that no reader ever uses until Commit renames it.
func Create(fsys vfs.FS, dir string, seq uint64) (*Writer, error) {
	final := filepath.Join(dir, Name(seq))
	w := &Writer{fsys: fsys, dir: dir, seq: seq, final: final, tmp: final + tmpSuffix}
	f, err := fsys.Create(w.tmp)
	if err != nil {
		return nil, fmt.Errorf("snapshot: create %s: %w", w.tmp, err)
	}
	w.f = f
	// A header with no length yet: it is rewritten by Commit.
	if _, err := f.Write(make([]byte, headerSize)); err != nil {
		w.Abort()
		return nil, fmt.Errorf("snapshot: write %s: %w", w.tmp, err)
	}
	return w, nil
}

// Write appends p to the body.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if _, err := w.f.Write(p); err != nil {
		w.err = fmt.Errorf("snapshot: write %s: %w", w.tmp, err)
		return 0, w.err
	}
	w.crc = crc32.Update(w.crc, crcTable, p)
	w.n += uint64(len(p))
	w.unsynced += len(p)
	if w.unsynced >= SyncEvery {
		if err := w.f.Sync(); err != nil {
			w.err = fmt.Errorf("snapshot: sync %s: %w", w.tmp, err)
			return 0, w.err
		}
		w.unsynced = 0
	}
	return len(p), nil
}

// Size is the number of body bytes written so far.
func (w *Writer) Size() int64 { return int64(w.n) }

// Commit completes the snapshot: header and checksum written, the file
// synced, renamed to its final name and the directory synced. On error the
// temporary file is removed and no snapshot exists under the final name.
func (w *Writer) Commit() (string, error) {
	if w.err != nil {
		w.Abort()
		return "", w.err
	}
	if w.n > maxBody {
		w.Abort()
		return "", fmt.Errorf("snapshot: %s: a body of %d bytes is over the %d-byte limit", w.tmp, w.n, uint64(maxBody))
	}
	hdr := header(w.seq, w.n)
	crc := crc32Combine(crc32.Checksum(hdr, crcTable), w.crc, int64(w.n))
	fail := func(what string, err error) (string, error) {
		w.Abort()
		return "", fmt.Errorf("snapshot: %s %s: %w", what, w.tmp, err)
	}
	if _, err := w.f.Write(binary.LittleEndian.AppendUint32(nil, crc)); err != nil {
		return fail("write", err)
	}
	if _, err := w.f.WriteAt(hdr, 0); err != nil {
		return fail("write", err)
	}
	if err := w.f.Sync(); err != nil {
		return fail("sync", err)
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		return fail("close", err)
	}
	if err := w.fsys.Rename(w.tmp, w.final); err != nil {
		return fail("rename", err)
	}
	if err := w.fsys.SyncDir(w.dir); err != nil {
		return "", fmt.Errorf("snapshot: sync directory %s: %w", w.dir, err)
	}
	return w.final, nil
}

// Abort gives the snapshot up and removes its temporary file (best effort:
// Clean removes what a failure leaves).
func (w *Writer) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	w.fsys.Remove(w.tmp)
}

// header returns the header of a snapshot covering seq with a body of n
// bytes.
func header(seq, n uint64) []byte {
	b := make([]byte, headerSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], Version)
	binary.LittleEndian.PutUint32(b[12:], 0)
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint64(b[24:], n)
	return b
}

// crc32Combine returns the CRC-32C of A followed by B from crcA, crcB and
// the length of B (zlib's crc32_combine: appending lenB zero bits is a
// linear map over GF(2), applied by repeated squaring of its matrix).
func crc32Combine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	var even, odd [32]uint32
	odd[0] = crc32.Castagnoli // the reflected polynomial: one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // one zero byte, then 4, 16, ...
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range mat {
		square[n] = gf2Times(mat, mat[n])
	}
}

// List returns the snapshot files of dir, newest (highest seq) first.
// Temporary files are not listed.
func List(fsys vfs.FS, dir string) ([]Info, error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	var out []Info
	for _, name := range names {
		digits, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		digits, ok = strings.CutSuffix(digits, suffix)
		if !ok {
			continue
		}
		seq, err := strconv.ParseUint(digits, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Info{Seq: seq, Path: filepath.Join(dir, name)})
	}
	slices.SortFunc(out, func(a, b Info) int { return -cmpUint(a.Seq, b.Seq) })
	return out, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Newest opens the snapshots of dir newest first, skipping those that
// cover records after upTo (0: none is skipped), and hands each to use
// until one is intact and use accepts it; it returns that snapshot (zero
// Seq and Path if none) and the errors of the damaged ones it skipped (they
// are never used). A snapshot is damaged if its file does not check out
// (OpenBody), if it covers another record than its name says, or if use
// fails on it (say, its body does not decode). The caller decides whether
// falling back is acceptable: it is only if the journal still holds every
// record after the snapshot used.
func Newest(fsys vfs.FS, dir string, upTo uint64, use func(*Body) error) (Info, []error, error) {
	infos, err := List(fsys, dir)
	if err != nil {
		return Info{}, nil, err
	}
	var damaged []error
	for _, in := range infos {
		if upTo != 0 && in.Seq > upTo {
			continue
		}
		body, err := OpenBody(fsys, in.Path)
		if err == nil {
			if body.Seq != in.Seq {
				err = fmt.Errorf("%w: %s covers record %d, its name says %d", ErrCorrupt, in.Path, body.Seq, in.Seq)
			} else if err = use(body); err != nil {
				err = fmt.Errorf("%s: %w", in.Path, err)
			}
			body.Close()
		}
		if err != nil {
			damaged = append(damaged, err)
			continue
		}
		return in, damaged, nil
	}
	return Info{}, damaged, nil
}

// Clean removes the temporary files a crash left in dir, and every snapshot
// older than the newest keep ones.
func Clean(fsys vfs.FS, dir string, keep int) error {
	names, err := fsys.List(dir)
	if err != nil {
		return fmt.Errorf("snapshot: list %s: %w", dir, err)
	}
	removed := false
	for _, name := range names {
		if strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix+tmpSuffix) {
			if err := fsys.Remove(filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("snapshot: remove %s: %w", name, err)
			}
			removed = true
		}
	}
	infos, err := List(fsys, dir)
	if err != nil {
		return err
	}
	if len(infos) > keep {
		for _, in := range infos[keep:] {
			if err := fsys.Remove(in.Path); err != nil {
				return fmt.Errorf("snapshot: remove %s: %w", in.Path, err)
			}
			removed = true
		}
	}
	if removed {
		return fsys.SyncDir(dir)
	}
	return nil
}

// Body is an intact snapshot's body, to be read as a stream.
type Body struct {
	Seq  uint64 // the last journal record the snapshot covers
	Size int    // the body's length
	io.Reader
	f vfs.File
}

// Close closes the snapshot file.
func (b *Body) Close() error { return b.f.Close() }

// OpenBody checks a snapshot file in one streaming pass (header, length,
// checksum) and returns its body as a reader, so that a large snapshot is
// never held in memory whole. Damage wraps ErrCorrupt and names the file.
func OpenBody(fsys vfs.FS, path string) (*Body, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, fmt.Errorf("snapshot: open %s: %w", path, err)
	}
	fail := func(err error) (*Body, error) {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	var hdr [headerSize]byte
	if fi.Size() < headerSize+crcSize {
		return fail(fmt.Errorf("%w: %d bytes is shorter than a header", ErrCorrupt, fi.Size()))
	}
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return fail(err)
	}
	if string(hdr[:8]) != magic {
		return fail(fmt.Errorf("%w: bad magic %q", ErrCorrupt, hdr[:8]))
	}
	if v := binary.LittleEndian.Uint32(hdr[8:]); v != Version {
		return fail(fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, v, Version))
	}
	n := binary.LittleEndian.Uint64(hdr[24:])
	if n > maxBody || uint64(fi.Size()) != headerSize+n+crcSize {
		return fail(fmt.Errorf("%w: body length %d does not match the file size %d", ErrCorrupt, n, fi.Size()))
	}
	h := crc32.New(crcTable)
	h.Write(hdr[:])
	if _, err := io.CopyN(h, f, int64(n)); err != nil {
		return fail(err)
	}
	var sum [crcSize]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return fail(err)
	}
	if got, want := h.Sum32(), binary.LittleEndian.Uint32(sum[:]); got != want {
		return fail(fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want))
	}
	if _, err := f.Seek(headerSize, io.SeekStart); err != nil {
		return fail(err)
	}
	return &Body{
		Seq:    binary.LittleEndian.Uint64(hdr[16:]),
		Size:   int(n),
		Reader: bufio.NewReaderSize(io.LimitReader(f, int64(n)), 1<<20),
		f:      f,
	}, nil
}
