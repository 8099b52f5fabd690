// Package journal is runlog's write-ahead log: an append-only sequence of
// records kept in numbered segment files, made durable with fdatasync before
// an append returns, shared by many concurrent appenders through group
// commit, and checked on open so that a torn tail is repaired and any other
// damage is refused.
//
// # Files
//
// A journal is a directory. Its segments are named by a 20-digit zero-padded
// index, 00000000000000000001.seg, 00000000000000000002.seg, ...; only the
// highest one (the active segment) is written to. Other files may live in
// the same directory and are ignored: LOCK (the flock that keeps a second
// process out), MARK (the marker, see mark.go: how far the journal had
// durably reached at the last Open, rotation or Close), *.snap (snapshots),
// *.seg.tmp (a segment being created; a leftover one is removed on open)
// and *.seg.broken (a copy of bytes cut off a torn tail by Open).
//
// # Segment format (version 2)
//
// All integers are little-endian. A segment is a 40-byte header followed by
// frames, each a multiple of 8 bytes long, so every frame starts 8-aligned,
// and possibly by zeros: new segments are preallocated (zero-filled), and
// zeros after the last frame are free space.
//
//	segment header (40 bytes)
//	+---------+---------+----------+---------------+-----------------+---------+----------+
//	| magic   | version | prealloc | segment index | first sequence  | crc32c  | reserved |
//	| 8 bytes | u32 = 2 | u32      | u64           | number u64      | u32     | u32 = 0  |
//	+---------+---------+----------+---------------+-----------------+---------+----------+
//	 0         8         12         16              24                32        36       40
//	magic is "RUNLOGJ\x00"; crc32c covers bytes 0..32; prealloc is the size
//	the file was zero-filled and synced to before it was published (0: not
//	preallocated). Version 1 has the same layout with prealloc reserved
//	(zero); it is still read.
//
//	frame (16 + length + pad bytes)
//	+--------+--------+----------------+---------------------+-------------+
//	| length | crc32c | synced offset  | payload             | pad (zeros) |
//	| u32    | u32    | u64            | length bytes        | 0..7 bytes  |
//	+--------+--------+----------------+---------------------+-------------+
//	 0        4        8                16                    16+length
//	crc32c (Castagnoli) covers the length field and bytes 8 to the end of
//	the pad, so it protects the length, the synced offset, the payload and
//	the padding.
//
// A record's sequence number is not stored in its frame: it is the segment's
// first sequence number plus the record's ordinal in the segment. Sequence
// numbers start at 1 and continue across segments, and the header keeps them
// right after old segments are dropped.
//
// The synced offset of a frame is the size the segment had durably reached
// when the frame's group commit began (the end of the previous group). Open
// uses it to tell a torn write from damage: see below.
//
// The magic, the version, the header and frame layouts, the 8-byte
// alignment and the CRC polynomial are the wire format and must never
// change; a new layout needs a new version number.
//
// # Torn tail or corruption
//
// Open reads every segment. When a frame is bad (short, a length above
// MaxRecordSize or past the end of the file, a CRC mismatch), it looks at
// the rest of the segment. If only zeros follow, that is the clean end of
// the data (preallocated space, or writes that never reached the disk). If
// a valid frame follows whose synced offset is beyond the bad frame's start,
// that frame was written after the bad bytes had been made durable, so the
// bad bytes were once acknowledged: that is corruption, and Open refuses
// with a *CorruptError (errors.Is ErrCorrupt) naming the file and the
// offset. Otherwise the bad bytes and everything after them belong to a
// group commit whose fdatasync never returned: a torn write. In the newest
// segment Open then copies the cut bytes to <segment>.broken, cuts them off
// (truncating, or zeroing them when preallocated zeros follow) and carries
// on; in any older segment a bad frame
// is corruption. Sequence numbers must continue from one segment to the
// next and no segment may be missing in between. A record is never skipped.
//
// The one case the frames cannot decide is damage, after its fdatasync
// returned, to the newest group commit of the newest segment: it looks like a
// torn write and is truncated, unless the marker names it. Every earlier
// record is protected.
//
// # Cut, zeroed or deleted records
//
// A newest segment cut at a record boundary, its last records zeroed, or the
// file deleted read like a clean end. Open (and Verify) refuse them when the
// marker names more than is there: a newer segment or later records. And a
// newest segment shorter than the prealloc size its header records was cut
// (sealing trims only older segments, and the torn-tail repair keeps that
// size). A crash cannot cause either: the marker names only records and
// segments already durable. Records appended after the last marker (see
// Options.MarkEvery), then zeroed (or cut from a segment that is not
// preallocated), stay undetectable.
package journal

import (
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"time"

	"github.com/runlog/runlog/internal/vfs"
)

// Format constants. They are part of the on-disk format and must never
// change.
const (
	// Magic opens every segment.
	Magic = "RUNLOGJ\x00"
	// Version is the format version this package writes; it reads it and
	// version 1 (the same layout without the preallocated size).
	Version = 2
	// HeaderSize is the size of a segment header.
	HeaderSize = 40
	// FrameHeaderSize is the size of the fixed part of a frame.
	FrameHeaderSize = 16
	// frameAlign is the alignment of every frame.
	frameAlign = 8
)

// maxRecordSizeLimit is the largest Options.MaxRecordSize accepted: 1 GiB,
// well below what a frame's u32 length field can carry, so that a length
// read from a damaged frame never asks for more memory than that. It is a
// limit of this package, not of the format: it may grow without a new
// format version.
const maxRecordSizeLimit = 1 << 30

// File naming.
const (
	segSuffix    = ".seg"
	tmpSuffix    = ".seg.tmp"
	brokenSuffix = ".broken"
	lockName     = "LOCK"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Defaults for Options.
const (
	// DefaultSegmentSize is the size at which a segment is sealed and a new
	// one started, unless Options.SegmentSize says otherwise.
	DefaultSegmentSize = 64 << 20
	// DefaultMaxRecordSize is the largest record accepted, unless
	// Options.MaxRecordSize says otherwise.
	DefaultMaxRecordSize = 4 << 20
)

// Errors. Every error the package returns that is about one of these wraps
// it, so callers test with errors.Is.
var (
	// ErrCorrupt means the journal holds damage that is not a torn tail:
	// opening is refused. The error is a *CorruptError with the file and
	// byte offset. Run `runlog journal verify` to see the damage.
	ErrCorrupt = errors.New("journal: corrupt")
	// ErrFailed means an earlier write or sync failed: the journal accepts
	// no more appends until it is closed and opened again.
	ErrFailed = errors.New("journal: failed")
	// ErrClosed means the journal was closed.
	ErrClosed = errors.New("journal: closed")
	// ErrTooLarge means a record is larger than Options.MaxRecordSize;
	// nothing was written and the journal stays usable.
	ErrTooLarge = errors.New("journal: record too large")
	// ErrLocked means another process, or another Open in this process,
	// holds the journal directory.
	ErrLocked = errors.New("journal: locked")
	// ErrDropped means records that Replay was asked for were dropped by
	// DropBefore (typically because a snapshot covers them).
	ErrDropped = errors.New("journal: records dropped")
)

// CorruptError reports damage that Open refuses to repair.
type CorruptError struct {
	// File is the path of the damaged file.
	File string
	// Offset is the byte offset of the damage in File.
	Offset int64
	// Reason says what is wrong.
	Reason string
}

// Error describes the damage and what to do.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: corrupt: %s at offset %d: %s (a crash cannot cause this; run `runlog journal verify %s` to see what is wrong, and restore the directory from a backup)",
		e.File, e.Offset, e.Reason, filepath.Dir(e.File))
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Options configure Open, Verify and Scan. Zero values take the documented
// defaults.
type Options struct {
	// FS is the filesystem. Defaults to vfs.OS{}.
	FS vfs.FS
	// SegmentSize: once the active segment reaches this many bytes, the next
	// append goes to a new segment. Defaults to DefaultSegmentSize (64 MiB).
	SegmentSize int64
	// MaxRecordSize is the largest record accepted by Append and by the
	// decoder. Defaults to DefaultMaxRecordSize (4 MiB); at most 1 GiB.
	MaxRecordSize int
	// NoPreallocate turns off preallocation. By default each new segment
	// is zero-filled to SegmentSize bytes before it is used (in the
	// background, while the previous one fills up), so that appends
	// overwrite existing blocks and each fdatasync flushes data only, not
	// file-system metadata; Open reads the unused zeros as free space.
	NoPreallocate bool
	// OnSync, if set, is called by the commit goroutine after each
	// successful group commit (for metrics). It must not block.
	OnSync func(SyncInfo)
	// OnWarning, if set, is called by the commit goroutine when the journal
	// works on despite a failure an operator should know of, typically a
	// full disk: the next segment could not be preallocated (the active
	// one still has room), or no new segment could be created and the
	// active one grows past SegmentSize. It must not block.
	OnWarning func(error)
	// MarkEvery, if positive, also rewrites the marker (MARK: how far the
	// journal has durably reached) while records are being appended, at
	// most once per MarkEvery and within MarkEvery of the last append, from
	// a goroutine of its own: each costs one fdatasync of the small MARK
	// file, never one of the segment, and an idle journal costs nothing.
	// Records the marker names are detected if they are later cut off or
	// zeroed; with 0 it is written only at Open, at each rotation and at
	// Close.
	MarkEvery time.Duration
	// OnReplay, if set, is called at the end of each Replay that read to the
	// end without an error: how many records and bytes it passed to its
	// func and how long it took (the replay at open, for its log line).
	OnReplay func(ReplayInfo)
}

// ReplayInfo describes one replay: the records and bytes read from the
// segments and the time it took, the func's work included.
type ReplayInfo struct {
	Records  int
	Bytes    int64
	Duration time.Duration
}

// SyncInfo describes one group commit: how many records and bytes one
// fdatasync covered and how long write plus sync took.
type SyncInfo struct {
	Records  int
	Bytes    int
	Duration time.Duration
}

// Position names a record.
type Position struct {
	// Seq is the record's 1-based sequence number, global and monotonic
	// across segments.
	Seq uint64
	// Segment is the index of the segment holding the record.
	Segment uint64
	// Offset is the byte offset of the record's frame in its segment.
	Offset int64
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	// Index is the segment's number, from its file name.
	Index uint64
	// FirstSeq is the sequence number its first record has (or would have).
	FirstSeq uint64
	// Size is the committed size in bytes.
	Size int64
	// Path is the file's path.
	Path string
}

// prealloc is how many bytes a new segment is zero-filled to.
func (o Options) prealloc() int64 {
	if o.NoPreallocate {
		return 0
	}
	return o.SegmentSize
}

// withDefaults fills zero fields and checks the others.
func (o Options) withDefaults() (Options, error) {
	if o.FS == nil {
		o.FS = vfs.OS{}
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.MaxRecordSize == 0 {
		o.MaxRecordSize = DefaultMaxRecordSize
	}
	if o.SegmentSize < 0 {
		return o, fmt.Errorf("journal: Options.SegmentSize is %d; use a positive size or 0 for the default", o.SegmentSize)
	}
	if o.MaxRecordSize < 0 || o.MaxRecordSize > maxRecordSizeLimit {
		return o, fmt.Errorf("journal: Options.MaxRecordSize is %d; use 1 to %d bytes, or 0 for the default", o.MaxRecordSize, maxRecordSizeLimit)
	}
	return o, nil
}
