package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"github.com/runlog/runlog/internal/vfs"
)

// TornTail describes the unfinished write at the end of the newest segment
// that Open cuts off (or, in a Verify report, would cut off).
type TornTail struct {
	// File is the segment's path.
	File string
	// Offset is where the valid records end and the cut starts.
	Offset int64
	// Bytes is how many bytes are (or would be) cut.
	Bytes int64
	// Reason says what is wrong with the bytes at Offset.
	Reason string

	saveEnd int64 // the cut bytes up to here (trailing zeros dropped) go to .broken
}

// recovery is the result of checking a journal directory.
type recovery struct {
	segs []segment
	torn *TornTail
	tmps []string // leftover temporary segment files
	mark mark     // the marker, if hasMark
	// hasMark is set when the directory has a valid marker.
	hasMark bool
}

// recoverDir checks every segment of dir in order and calls fn (if not nil)
// for each valid record, then checks the journal against its marker. It is
// the one check Open and Verify share. Damage is a *CorruptError, except
// for a torn tail of the newest segment, which is reported and, when
// repair is set and nothing else is wrong, cut off (after saving the cut
// bytes to <segment>.broken).
func recoverDir(fsys vfs.FS, dir string, maxRec int, repair bool, fn func(Position, []byte) error) (recovery, error) {
	var rec recovery
	// The marker first: everything it names was durable before it was
	// written, so it is all there when the segments are listed and read
	// after it, even by a Verify that runs beside a writer.
	var err error
	if rec.mark, rec.hasMark, err = readMark(fsys, dir); err != nil {
		return rec, err
	}
	indexes, tmps, err := listSegments(fsys, dir)
	if err != nil {
		return rec, err
	}
	rec.tmps = tmps
	if rec.hasMark {
		// First, so that the segment before a deleted newest one, shorter
		// than its preallocated size after an explicit Rotate, is not
		// blamed instead.
		var newest uint64
		if len(indexes) > 0 {
			newest = indexes[len(indexes)-1]
		}
		if err := checkMarkSegment(dir, rec.mark, newest); err != nil {
			return rec, err
		}
	}
	for i, idx := range indexes {
		path := filepath.Join(dir, segName(idx))
		if i > 0 && idx != indexes[i-1]+1 {
			return rec, &CorruptError{File: filepath.Join(dir, segName(indexes[i-1]+1)), Reason: fmt.Sprintf("segment file is missing between %s and %s", segName(indexes[i-1]), segName(idx))}
		}
		last := i == len(indexes)-1
		var want uint64 // the first sequence number this segment must have
		switch {
		case i > 0:
			want = rec.segs[i-1].firstSeq + rec.segs[i-1].records
		case idx == 1:
			want = 1
		}
		seg, torn, err := checkSegment(fsys, path, idx, want, last, maxRec, fn)
		if err != nil {
			return rec, err
		}
		if torn != nil {
			if !last {
				return rec, &CorruptError{File: path, Offset: torn.Offset, Reason: torn.Reason + " in a sealed segment (only the newest segment may end in a torn write)"}
			}
			if seg.firstSeq == 0 {
				return rec, &CorruptError{File: path, Reason: "segment header is torn and no earlier segment tells its first sequence number"}
			}
			rec.torn = torn
		}
		rec.segs = append(rec.segs, seg)
	}
	if rec.hasMark && len(rec.segs) > 0 {
		if err := checkMarkRecords(rec.mark, rec.segs[len(rec.segs)-1]); err != nil {
			return rec, err
		}
	}
	if rec.torn != nil && repair {
		if err := cutTail(fsys, dir, rec.segs[len(rec.segs)-1], rec.torn); err != nil {
			return rec, err
		}
	}
	return rec, nil
}

// checkSegment scans one segment. want is the first sequence number the
// segment must start with, 0 if unknown; newest is set for the newest
// segment, which must not be shorter than it was preallocated to (older
// ones are trimmed when they are sealed). A torn tail is returned, not
// repaired; seg then describes the part that is kept (a torn header keeps
// nothing but a header rebuilt from want).
func checkSegment(fsys vfs.FS, path string, idx, want uint64, newest bool, maxRec int, fn func(Position, []byte) error) (segment, *TornTail, error) {
	seg := segment{index: idx, path: path}
	f, err := fsys.Open(path)
	if err != nil {
		return seg, nil, fmt.Errorf("journal: open segment: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return seg, nil, fmt.Errorf("journal: stat segment: %w", err)
	}
	size := st.Size()
	var visit func(seq uint64, off int64, rec []byte) error
	if fn != nil {
		visit = func(seq uint64, off int64, rec []byte) error {
			return fn(Position{Seq: seq, Segment: idx, Offset: off}, rec)
		}
	}
	res, err := scanSegment(f, size, maxRec, visit)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) && ce.File == "" {
			ce.File = path
			return seg, nil, ce
		}
		return seg, nil, fmt.Errorf("journal: read %s: %w", path, err)
	}
	if res.shortHeader {
		seg.firstSeq, seg.size = want, HeaderSize
		return seg, &TornTail{File: path, Offset: 0, Bytes: size, Reason: res.tornReason, saveEnd: size}, nil
	}
	if res.hdr.index != idx {
		return seg, nil, &CorruptError{File: path, Offset: 16, Reason: fmt.Sprintf("header names segment %d; the file name says %d", res.hdr.index, idx)}
	}
	if want != 0 && res.hdr.firstSeq != want {
		return seg, nil, &CorruptError{File: path, Offset: 24, Reason: fmt.Sprintf("first sequence number is %d; the segments before it end at %d, so records are missing", res.hdr.firstSeq, want-1)}
	}
	if newest && size < res.hdr.prealloc {
		// The zeros were synced before the segment was published, and only
		// sealing a segment (or cutting a torn tail, which keeps the size)
		// shortens it: a crash cannot do this.
		return seg, nil, &CorruptError{File: path, Offset: size, Reason: fmt.Sprintf(
			"the newest segment is %d bytes, shorter than the %d bytes it was preallocated to: the file was cut, and the records at its end are lost", size, res.hdr.prealloc)}
	}
	seg.firstSeq, seg.records, seg.size, seg.prealloc = res.hdr.firstSeq, res.records, res.end, res.hdr.prealloc
	if res.tornReason != "" {
		return seg, &TornTail{File: path, Offset: res.end, Bytes: size - res.end, Reason: res.tornReason, saveEnd: res.dataEnd}, nil
	}
	return seg, nil, nil
}

// cutTail saves the torn bytes of seg (without trailing zeros, which a
// preallocated segment has plenty of) to a .broken file and truncates the
// segment to its valid prefix (rebuilding a torn header).
func cutTail(fsys vfs.FS, dir string, seg segment, torn *TornTail) error {
	f, err := fsys.OpenReadWrite(seg.path)
	if err != nil {
		return fmt.Errorf("journal: repair torn tail of %s: %w", seg.path, err)
	}
	defer f.Close()
	if n := torn.saveEnd - torn.Offset; n > 0 {
		cut := make([]byte, n)
		if _, err := f.ReadAt(cut, torn.Offset); err != nil {
			return fmt.Errorf("journal: repair torn tail of %s: read the %d torn bytes at offset %d: %w", seg.path, n, torn.Offset, err)
		}
		if err := saveBroken(fsys, dir, seg.path, cut); err != nil {
			return err
		}
	}
	if size := torn.Offset + torn.Bytes; torn.Offset >= HeaderSize && (torn.saveEnd < size || seg.prealloc > torn.Offset) {
		// Preallocated zeros follow the torn bytes, or the file must keep
		// the size its header says it was preallocated to: zero the torn
		// bytes instead of truncating, so the segment stays preallocated
		// (and is not mistaken for a cut one), and trim only torn bytes
		// beyond that size.
		end := size // the file's size after the repair
		if torn.saveEnd == size {
			end = max(torn.Offset, seg.prealloc)
		}
		err = writeZeros(f, torn.Offset, min(torn.saveEnd, end))
		if err == nil && end < size {
			err = f.Truncate(end)
		}
	} else {
		err = f.Truncate(torn.Offset)
		if err == nil && torn.Offset < HeaderSize {
			_, err = f.WriteAt(appendHeader(nil, seg.index, seg.firstSeq), 0)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return fmt.Errorf("journal: repair torn tail of %s: cut at offset %d: %w", seg.path, torn.Offset, err)
	}
	return nil
}

// saveBroken durably writes the bytes cut off segPath to a new file named
// segPath.broken (or .broken.2, .broken.3, ... if taken).
func saveBroken(fsys vfs.FS, dir, segPath string, data []byte) error {
	name := segPath + brokenSuffix
	for n := 2; ; n++ {
		_, err := fsys.Stat(name)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("journal: save torn tail: %w", err)
		}
		name = segPath + brokenSuffix + "." + strconv.Itoa(n)
	}
	f, err := fsys.Create(name)
	if err != nil {
		return fmt.Errorf("journal: save torn tail to %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("journal: save torn tail to %s: %w", name, err)
	}
	return nil
}
