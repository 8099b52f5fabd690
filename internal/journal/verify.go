package journal

import (
	"fmt"

	"github.com/runlog/runlog/internal/vfs"
)

// Report summarises a journal directory for `runlog journal verify`.
type Report struct {
	// Segments is the number of segment files.
	Segments int
	// Records is the number of valid records.
	Records int
	// FirstSeq and LastSeq are the sequence numbers of the first and last
	// valid records (both 0 if there are none).
	FirstSeq, LastSeq uint64
	// OldestSeq is the sequence number of the oldest record kept (or, in
	// an empty journal, of the next one); records before it were dropped.
	OldestSeq uint64
	// NextSeq is the sequence number the next record appended will get
	// (after the torn tail, if any, is cut off).
	NextSeq uint64
	// Torn describes the torn tail Open would cut off, or is nil.
	Torn *TornTail
}

// Verify checks the journal in dir without locking it or changing anything,
// with the function Open uses: every frame of every segment, the sequence
// numbers across segments, the newest segment against its preallocated
// size and the journal against its marker (MARK), and whether the newest
// segment ends in a torn write (reported in Torn, not an error). Damage Open would refuse is an error wrapping ErrCorrupt (a
// *CorruptError with the file and offset). A directory without segments
// gives an empty Report.
func Verify(fsys vfs.FS, dir string, opts Options) (Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Report{}, err
	}
	if fsys == nil {
		fsys = opts.FS
	}
	rec, err := recoverDir(fsys, dir, opts.MaxRecordSize, false, nil)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Segments: len(rec.segs), Torn: rec.torn, OldestSeq: 1, NextSeq: 1} // Open starts an empty directory at 1
	if len(rec.segs) > 0 {
		last := rec.segs[len(rec.segs)-1]
		rep.OldestSeq, rep.NextSeq = rec.segs[0].firstSeq, last.firstSeq+last.records
	}
	for _, s := range rec.segs {
		rep.Records += int(s.records)
	}
	if rep.Records > 0 {
		last := rec.segs[len(rec.segs)-1]
		rep.FirstSeq = rec.segs[0].firstSeq // sequence numbers are contiguous
		rep.LastSeq = last.firstSeq + last.records - 1
	}
	return rep, nil
}

// Scan calls fn for every valid record of the journal in dir, in order,
// without locking it or changing anything; rec is valid only during the
// call. It stops before a torn tail (which is not an error) and returns a
// *CorruptError (wrapping ErrCorrupt) on damage Open would refuse, after
// having delivered the records before the damage. An error from fn stops
// the scan and is returned.
func Scan(fsys vfs.FS, dir string, opts Options, fn func(pos Position, rec []byte) error) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if fsys == nil {
		fsys = opts.FS
	}
	if fn == nil {
		return fmt.Errorf("journal: Scan needs a callback")
	}
	_, err = recoverDir(fsys, dir, opts.MaxRecordSize, false, fn)
	return err
}
