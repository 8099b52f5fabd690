package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/runlog/runlog/internal/vfs"
)

// The marker. A journal's format cannot tell a segment whose last records
// were cut off, zeroed or deleted after they were made durable from one
// that simply ends there. The marker file MARK remembers, at moments that
// cost no fsync of their own on the append path (Open, each rotation,
// Close), how far the journal had durably reached: the newest segment's
// index and the sequence number the next record would get. Open (and
// Verify) refuse a journal that ends before what the marker names.
//
// MARK holds two slots, at offsets 0 and markSlotGap, each
//
//	+---------+---------+----------+------------+---------------+----------+---------+----------+
//	| magic   | version | reserved | generation | segment index | next seq | crc32c  | reserved |
//	| 8 bytes | u32 = 1 | u32 = 0  | u64        | u64           | u64      | u32     | u32 = 0  |
//	+---------+---------+----------+------------+---------------+----------+---------+----------+
//	magic is "RUNLOGM\x00"; crc32c covers bytes 0..40.
//
// A write overwrites the older slot in place and fdatasyncs the file: no
// new block, no rename, no directory sync, so it works on a full disk, and
// a torn write leaves the other slot, which claims less. The valid slot
// with the higher generation is the marker; a file with no valid slot (a
// crash while it was first created) is no marker.

const (
	markName    = "MARK"
	markMagic   = "RUNLOGM\x00"
	markVersion = 1
	markSlot    = 48
	markSlotGap = 4096 // slots in different pages and sectors, even 4 KiB ones
)

// mark is what one marker slot says: records before nextSeq were durable,
// and segment index existed, when it was written.
type mark struct {
	gen     uint64
	index   uint64
	nextSeq uint64
}

func encodeMark(m mark) []byte {
	b := make([]byte, 0, markSlot)
	b = append(b, markMagic...)
	b = binary.LittleEndian.AppendUint32(b, markVersion)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint64(b, m.gen)
	b = binary.LittleEndian.AppendUint64(b, m.index)
	b = binary.LittleEndian.AppendUint64(b, m.nextSeq)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return binary.LittleEndian.AppendUint32(b, 0)
}

func decodeMark(b []byte) (mark, bool) {
	if len(b) < markSlot || string(b[:8]) != markMagic || binary.LittleEndian.Uint32(b[8:12]) != markVersion ||
		binary.LittleEndian.Uint32(b[40:44]) != crc32.Checksum(b[:40], crcTable) {
		return mark{}, false
	}
	return mark{
		gen:     binary.LittleEndian.Uint64(b[16:24]),
		index:   binary.LittleEndian.Uint64(b[24:32]),
		nextSeq: binary.LittleEndian.Uint64(b[32:40]),
	}, true
}

// readMark returns the marker of dir, and false if there is none (no file,
// as in a directory of an older runlog, or no valid slot).
func readMark(fsys vfs.FS, dir string) (mark, bool, error) {
	f, err := fsys.Open(filepath.Join(dir, markName))
	if errors.Is(err, fs.ErrNotExist) {
		return mark{}, false, nil
	}
	if err != nil {
		return mark{}, false, fmt.Errorf("journal: open marker: %w", err)
	}
	defer f.Close()
	buf := make([]byte, markSlotGap+markSlot)
	n, _ := f.ReadAt(buf, 0) // a short file has fewer valid slots
	a, okA := decodeMark(buf[:min(n, markSlot)])
	b, okB := mark{}, false
	if n >= markSlotGap+markSlot {
		b, okB = decodeMark(buf[markSlotGap:])
	}
	switch {
	case okA && (!okB || a.gen > b.gen):
		return a, true, nil
	case okB:
		return b, true, nil
	}
	return mark{}, false, nil
}

// checkMarkSegment returns the damage a journal whose newest segment is
// newest (0: none) shows against the marker m: a newest segment older than
// the one m names was deleted.
func checkMarkSegment(dir string, m mark, newest uint64) error {
	if newest >= m.index {
		return nil
	}
	have := "there is no segment"
	if newest > 0 {
		have = "the newest segment is " + segName(newest)
	}
	return &CorruptError{File: filepath.Join(dir, segName(m.index)), Reason: fmt.Sprintf(
		"segment file is missing: %s says it existed, with records up to %d before it or in it, but %s (was it deleted?)", markName, m.nextSeq-1, have)}
}

// checkMarkRecords returns the damage the newest segment shows against
// the marker m: records m says were durable are not there.
func checkMarkRecords(m mark, newest segment) error {
	nextSeq := newest.firstSeq + newest.records
	if nextSeq >= m.nextSeq {
		return nil
	}
	return &CorruptError{File: newest.path, Offset: newest.size, Reason: fmt.Sprintf(
		"the journal ends at record %d, but %s says records up to %d were durable: records %d to %d were cut off or zeroed after they were written",
		nextSeq-1, markName, m.nextSeq-1, nextSeq, m.nextSeq-1)}
}

// marker writes the marker of an open journal. Its methods are safe for
// concurrent use. Failures are not fatal: the slot on disk then names less
// than it could, so damage goes undetected, but nothing is lost.
type marker struct {
	mu   sync.Mutex
	f    vfs.File
	last mark // the newest slot written
}

// openMarker opens the marker of dir, creating the file (durably) if it
// has no valid slot. cur is the current marker, if have.
func openMarker(fsys vfs.FS, dir string, cur mark, have bool) (*marker, error) {
	path := filepath.Join(dir, markName)
	if have {
		f, err := fsys.OpenReadWrite(path)
		if err != nil {
			return nil, fmt.Errorf("journal: open marker: %w", err)
		}
		return &marker{f: f, last: cur}, nil
	}
	f, err := fsys.Create(path)
	if err != nil {
		return nil, fmt.Errorf("journal: create marker: %w", err)
	}
	buf := make([]byte, markSlotGap+markSlot)
	_, err = f.WriteAt(buf, 0)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		f.Close()
		_ = fsys.Remove(path) // no valid slot in it: the next Open starts over
		return nil, fmt.Errorf("journal: create marker %s: %w", path, err)
	}
	return &marker{f: f}, nil
}

// write makes the marker say that segment index exists and records before
// nextSeq are durable; the caller has made them so. It never goes back.
func (m *marker) write(index, nextSeq uint64) error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil || (index <= m.last.index && nextSeq <= m.last.nextSeq) {
		return nil
	}
	next := mark{gen: m.last.gen + 1, index: max(index, m.last.index), nextSeq: max(nextSeq, m.last.nextSeq)}
	_, err := m.f.WriteAt(encodeMark(next), int64(next.gen%2)*markSlotGap)
	if err == nil {
		err = m.f.Sync()
	}
	if err != nil {
		return fmt.Errorf("journal: write marker: %w", err)
	}
	m.last = next
	return nil
}

// close closes the marker file.
func (m *marker) close() error {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.f == nil {
		return nil
	}
	err := m.f.Close()
	m.f = nil
	return err
}
