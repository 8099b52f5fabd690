package journal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/runlog/runlog/internal/vfs"
	"pgregory.net/rapid"
)

// TestModel is a property test: any sequence of appends, batches,
// rotations, drops, reopens and replays behaves like a plain list of
// records, of which DropBefore removes only whole old segments.
func TestModel(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		m := vfs.NewMem()
		opts := Options{
			FS:            m,
			SegmentSize:   rapid.Int64Range(64, 2048).Draw(rt, "segSize"),
			MaxRecordSize: 256,
			NoPreallocate: rapid.Bool().Draw(rt, "noPrealloc"),
		}
		j, err := Open("j", opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer func() { j.Close() }()
		var model [][]byte // model[i] is record seq i+1
		oldest := uint64(1)
		rec := rapid.SliceOfN(rapid.Byte(), 0, 300)
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				r := rec.Draw(rt, "rec")
				p, err := j.Append(r)
				if len(r) > opts.MaxRecordSize {
					if !errors.Is(err, ErrTooLarge) {
						rt.Fatalf("Append of %d bytes: %v; want ErrTooLarge", len(r), err)
					}
					return
				}
				if err != nil || p.Seq != uint64(len(model))+1 {
					rt.Fatalf("Append = %+v, %v; want seq %d", p, err, len(model)+1)
				}
				model = append(model, r)
			},
			"batch": func(rt *rapid.T) {
				rs := rapid.SliceOfN(rapid.SliceOfN(rapid.Byte(), 0, 100), 0, 8).Draw(rt, "recs")
				p, err := j.AppendBatch(rs)
				if err != nil || (len(rs) > 0 && p.Seq != uint64(len(model))+1) {
					rt.Fatalf("AppendBatch = %+v, %v", p, err)
				}
				model = append(model, rs...)
			},
			"rotate": func(rt *rapid.T) {
				if next, err := j.Rotate(); err != nil || next != uint64(len(model))+1 {
					rt.Fatalf("Rotate = %d, %v; want %d", next, err, len(model)+1)
				}
			},
			"drop": func(rt *rapid.T) {
				seq := rapid.Uint64Range(0, uint64(len(model))+1).Draw(rt, "seq")
				if err := j.DropBefore(seq); err != nil {
					rt.Fatal(err)
				}
				segs := j.Segments()
				first := segs[0].FirstSeq
				if first < oldest || first > max(seq, oldest) {
					rt.Fatalf("after DropBefore(%d) the oldest record is %d (was %d)", seq, first, oldest)
				}
				if len(segs) > 1 && segs[1].FirstSeq <= seq {
					rt.Fatalf("DropBefore(%d) kept segment %+v whose records are all older", seq, segs[0])
				}
				oldest = first
			},
			"reopen": func(rt *rapid.T) {
				if err := j.Close(); err != nil {
					rt.Fatal(err)
				}
				if j, err = Open("j", opts); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				if j.LastSeq() != uint64(len(model)) {
					rt.Fatalf("LastSeq %d; want %d", j.LastSeq(), len(model))
				}
				from := oldest + uint64(len(model)+1-int(oldest))/2
				want := from
				err := j.Replay(from, func(p Position, r []byte) error {
					if p.Seq != want || !bytes.Equal(r, model[p.Seq-1]) {
						rt.Fatalf("Replay(%d) gave seq %d %x; want seq %d %x", from, p.Seq, r, want, model[want-1])
					}
					want++
					return nil
				})
				if err != nil || want != uint64(len(model))+1 {
					rt.Fatalf("Replay(%d) ended at %d with %v; want %d records", from, want, err, len(model)+1-int(from))
				}
			},
		})
	})
}
