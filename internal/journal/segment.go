package journal

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/runlog/runlog/internal/vfs"
)

// segment is the journal's view of one segment file.
type segment struct {
	index    uint64
	firstSeq uint64
	prealloc int64  // the size its header says it was zero-filled to, or 0
	records  uint64 // committed records
	size     int64  // committed bytes, header included
	path     string
}

func (s segment) info() SegmentInfo {
	return SegmentInfo{Index: s.index, FirstSeq: s.firstSeq, Size: s.size, Path: s.path}
}

// segName is the file name of segment index.
func segName(index uint64) string {
	return fmt.Sprintf("%020d%s", index, segSuffix)
}

// parseSegName returns the index of a segment file name, or false if name
// is not one.
func parseSegName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, segSuffix)
	if !ok || len(digits) != 20 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil && n > 0
}

// listSegments returns the indexes of the segment files in dir, ascending,
// and the paths of leftover temporary segment files.
func listSegments(fsys vfs.FS, dir string) (indexes []uint64, tmps []string, err error) {
	names, err := fsys.List(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("journal: list %s: %w", dir, err)
	}
	for _, name := range names {
		if idx, ok := parseSegName(name); ok {
			indexes = append(indexes, idx)
		} else if _, ok := parseSegName(strings.TrimSuffix(name, ".tmp")); ok && strings.HasSuffix(name, tmpSuffix) {
			tmps = append(tmps, filepath.Join(dir, name))
		}
	}
	return indexes, tmps, nil // names are sorted and indexes zero-padded
}

// errNotCreated is wrapped by the errors of creating a segment that failed
// before the segment was renamed into place and that left no file behind
// but perhaps a temporary one (which Open removes): the journal's files are
// as they were, so the journal can go on in its active segment. A full disk
// (ENOSPC) while preallocating is the usual cause.
var errNotCreated = errors.New("segment not created")

// createSegment durably creates the empty segment index whose first record
// will have sequence number firstSeq, zero-filled to prealloc bytes: see
// prepareSegment and publishSegment. It returns the segment open for
// reading and writing.
func createSegment(fsys vfs.FS, dir string, index, firstSeq uint64, prealloc int64) (vfs.File, error) {
	f, err := prepareSegment(fsys, dir, index, prealloc)
	if err != nil {
		return nil, err
	}
	if err := publishSegment(fsys, dir, f, index, firstSeq); err != nil {
		f.Close()
		if errors.Is(err, errNotCreated) {
			_ = fsys.Remove(filepath.Join(dir, segName(index)) + ".tmp")
		}
		return nil, err
	}
	return f, nil
}

// zeros is a source of zero bytes for preallocation.
var zeros = make([]byte, 256<<10)

// prepareSegment creates the temporary file of segment index, zero-filled
// to size bytes and synced. Writing the zeros now means later appends
// overwrite blocks that already exist, so their fdatasync need not commit
// file-system metadata; Open reads a tail of zeros as unused space. If it
// fails it removes the partial file, so that a disk it filled has that
// room back, and the error wraps errNotCreated.
func prepareSegment(fsys vfs.FS, dir string, index uint64, size int64) (vfs.File, error) {
	tmp := filepath.Join(dir, segName(index)) + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return nil, fmt.Errorf("journal: create segment %s: %w: %w", tmp, errNotCreated, err)
	}
	err = writeZeros(f, 0, size)
	if err == nil && size > 0 {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		_ = fsys.Remove(tmp)
		return nil, fmt.Errorf("journal: preallocate segment %s to %d bytes: %w: %w", tmp, size, errNotCreated, err)
	}
	return f, nil
}

// writeZeros writes zeros over bytes [from, to) of f.
func writeZeros(f vfs.File, from, to int64) error {
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			return err
		}
	}
	return nil
}

// publishSegment turns the prepared file f of segment index into the
// segment: it writes the header, syncs, renames the file into place and
// syncs the directory. A crash at any point leaves either no segment or one
// with a complete header. An error before the rename wraps errNotCreated
// (the caller removes the temporary file); a failed directory sync after it
// does not: the segment may or may not be in place.
func publishSegment(fsys vfs.FS, dir string, f vfs.File, index, firstSeq uint64) error {
	path := filepath.Join(dir, segName(index))
	// The header records how far the file was zero-filled (and synced):
	// Open then knows that a newest segment shorter than that was cut.
	st, err := f.Stat()
	if err == nil {
		_, err = f.WriteAt(appendHeaderSized(nil, index, firstSeq, st.Size()), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = fsys.Rename(path+".tmp", path)
	}
	if err != nil {
		return fmt.Errorf("journal: create segment %s: %w: %w", path, errNotCreated, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("journal: create segment %s: %w", path, err)
	}
	return nil
}

// removeFiles removes paths and syncs dir.
func removeFiles(fsys vfs.FS, dir string, paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := fsys.Remove(p); err != nil {
			errs = append(errs, fmt.Errorf("journal: remove %s: %w", p, err))
		}
	}
	if len(paths) > 0 {
		if err := fsys.SyncDir(dir); err != nil {
			errs = append(errs, fmt.Errorf("journal: sync directory %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// IsSegment reports whether name (a file name in a journal directory) is
// one of the journal's segment files, e.g. for a disk-use metric.
func IsSegment(name string) bool {
	_, ok := parseSegName(name)
	return ok
}
