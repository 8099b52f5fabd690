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

// createSegment durably creates the empty segment index whose first record
// will have sequence number firstSeq: the header is written to a temporary
// file and synced, the file is renamed into place and the directory synced.
// A crash at any point leaves either no segment or a complete header.
func createSegment(fsys vfs.FS, dir string, index, firstSeq uint64) (err error) {
	path := filepath.Join(dir, segName(index))
	tmp := path + ".tmp"
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("journal: create segment %s: %w", tmp, err)
	}
	_, err = f.Write(appendHeader(nil, index, firstSeq))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
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
