package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// segHeader is a decoded segment header.
type segHeader struct {
	version  uint32
	index    uint64
	firstSeq uint64
	// prealloc is the size the file was zero-filled to before it was
	// published, 0 if it was not preallocated or the header is version 1,
	// which does not say.
	prealloc int64
}

// decodeHeader decodes a segment header from b (at least HeaderSize bytes)
// of version 1 or 2. A non-empty reason says why the header is invalid.
func decodeHeader(b []byte) (h segHeader, reason string) {
	h.version = binary.LittleEndian.Uint32(b[8:12])
	switch {
	case string(b[0:8]) != Magic:
		return h, fmt.Sprintf("bad magic %q (not a runlog journal segment)", b[0:8])
	case binary.LittleEndian.Uint32(b[32:36]) != crc32.Checksum(b[0:32], crcTable):
		return h, "segment header checksum mismatch"
	case h.version != 1 && h.version != Version:
		return h, fmt.Sprintf("format version %d; this build reads versions 1 to %d (was the directory written by a newer runlog?)", h.version, Version)
	case h.version == 1 && binary.LittleEndian.Uint32(b[12:16]) != 0, binary.LittleEndian.Uint32(b[36:40]) != 0:
		return h, "reserved header bytes are not zero"
	}
	if h.version >= 2 {
		h.prealloc = int64(binary.LittleEndian.Uint32(b[12:16]))
	}
	h.index = binary.LittleEndian.Uint64(b[16:24])
	h.firstSeq = binary.LittleEndian.Uint64(b[24:32])
	if h.firstSeq == 0 {
		return h, "first sequence number is 0"
	}
	return h, ""
}

// frameLen reads the fixed part of the frame at off from hdr (at least
// FrameHeaderSize bytes) and returns the whole frame's size, or a reason why
// no valid frame of at most maxRec payload bytes can start there when
// remain bytes are left in the file.
func frameLen(hdr []byte, off, remain int64, maxRec int) (n int, reason string) {
	length := binary.LittleEndian.Uint32(hdr[0:4])
	synced := int64(binary.LittleEndian.Uint64(hdr[8:16]))
	switch {
	case length > uint32(maxRec):
		return 0, fmt.Sprintf("record length %d exceeds the maximum %d", length, maxRec)
	case int64(frameSize(int(length))) > remain:
		return 0, fmt.Sprintf("frame of %d bytes runs past the end of the file (%d bytes left)", frameSize(int(length)), remain)
	case synced < HeaderSize || synced > off:
		return 0, fmt.Sprintf("synced offset %d out of range", synced)
	}
	return frameSize(int(length)), ""
}

// checkFrame verifies a whole frame f and returns its payload and synced
// offset, or a reason why it is invalid.
func checkFrame(f []byte) (payload []byte, synced int64, reason string) {
	if binary.LittleEndian.Uint32(f[4:8]) != frameCRC(f) {
		if allZero(f) {
			return nil, 0, "zeroed frame"
		}
		return nil, 0, "frame checksum mismatch"
	}
	length := binary.LittleEndian.Uint32(f[0:4])
	return f[16 : 16+length], int64(binary.LittleEndian.Uint64(f[8:16])), ""
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// window reads a file through a reusable buffer, so decoding costs one read
// per window rather than per frame. It never holds more than max(window,
// the largest frame asked for) bytes.
type window struct {
	r    io.ReaderAt
	size int64
	buf  []byte // bytes [at, at+len(buf)) of the file
	at   int64
}

const windowSize = 64 << 10

// peek returns bytes [off, off+n) of the file; off+n must not exceed size.
// The result is valid until the next peek.
func (w *window) peek(off int64, n int) ([]byte, error) {
	if off >= w.at && off+int64(n) <= w.at+int64(len(w.buf)) {
		return w.buf[off-w.at : off-w.at+int64(n)], nil
	}
	want := int(min(max(int64(n), windowSize), w.size-off))
	if cap(w.buf) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	k, err := w.r.ReadAt(w.buf, off)
	if k < want {
		w.buf = w.buf[:0]
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read at offset %d: %w", off, err)
	}
	w.at = off
	return w.buf[:n], nil
}

// frameAt returns the payload and synced offset of the valid frame at off
// and its size, or a reason why there is none.
func (w *window) frameAt(off int64, maxRec int) (payload []byte, synced int64, n int, reason string, err error) {
	remain := w.size - off
	if remain < FrameHeaderSize {
		return nil, 0, 0, fmt.Sprintf("%d stray bytes at the end of the file", remain), nil
	}
	hdr, err := w.peek(off, FrameHeaderSize)
	if err != nil {
		return nil, 0, 0, "", err
	}
	n, reason = frameLen(hdr, off, remain, maxRec)
	if reason != "" {
		if allZero(hdr) {
			reason = "zeroed frame"
		}
		return nil, 0, 0, reason, nil
	}
	f, err := w.peek(off, n)
	if err != nil {
		return nil, 0, 0, "", err
	}
	payload, synced, reason = checkFrame(f)
	return payload, synced, n, reason, nil
}

// scanResult is what scanSegment learned about one segment. The segment's
// valid records end at end; the bytes after it are either all zeros (clean)
// or a torn write (tornReason set).
type scanResult struct {
	hdr     segHeader
	records uint64
	// end is the offset just after the last valid frame; the segment is
	// clean when end equals its size.
	end int64
	// shortHeader is set when the file is too short to hold a header; the
	// other fields are then zero.
	shortHeader bool
	// tornReason, if set, says why the bytes from end on are not valid
	// frames: a torn write. Bytes after end that are all zero are the
	// unused, preallocated part of the segment, not a torn write.
	tornReason string
	// dataEnd is, for a torn tail, the offset after its last non-zero byte.
	dataEnd int64
}

// scanSegment reads the segment in r, size bytes long, and calls fn (if not
// nil) for each valid record in order with its sequence number (from the
// header) and frame offset; rec is valid
// only during the call. A bad frame followed by nothing valid that was
// written after it became durable ends the scan as a torn tail (reported in
// the result, not as an error); real damage is a *CorruptError without
// File. Errors from fn and read errors are returned as they are.
func scanSegment(r io.ReaderAt, size int64, maxRec int, fn func(seq uint64, off int64, rec []byte) error) (scanResult, error) {
	var res scanResult
	if size < HeaderSize {
		res.shortHeader = true
		res.tornReason = fmt.Sprintf("segment is %d bytes, shorter than its %d-byte header", size, HeaderSize)
		return res, nil
	}
	w := &window{r: r, size: size}
	hb, err := w.peek(0, HeaderSize)
	if err != nil {
		return res, err
	}
	var reason string
	if res.hdr, reason = decodeHeader(hb); reason != "" {
		return res, &CorruptError{Offset: 0, Reason: reason}
	}
	off := int64(HeaderSize)
	for off < size {
		payload, _, n, reason, err := w.frameAt(off, maxRec)
		if err != nil {
			return res, err
		}
		if reason != "" {
			res.end = off
			last, err := w.lastNonZero(off)
			if err != nil || last < 0 {
				return res, err // only zeros follow: the unused, preallocated end
			}
			res.tornReason, res.dataEnd = reason, last+1
			return res, w.confirmTorn(off, last, maxRec, reason)
		}
		if fn != nil {
			if err := fn(res.hdr.firstSeq+res.records, off, payload); err != nil {
				return res, err
			}
		}
		res.records++
		off += int64(n)
	}
	res.end = off
	return res, nil
}

// lastNonZero returns the offset of the last non-zero byte at or after
// from, or -1 if there is none. It reads the file backwards a window at a
// time.
func (w *window) lastNonZero(from int64) (int64, error) {
	for end := w.size; end > from; {
		start := max(from, end-windowSize)
		b, err := w.peek(start, int(end-start))
		if err != nil {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return start + int64(i), nil
			}
		}
		end = start
	}
	return -1, nil
}

// confirmTorn looks past the bad frame at bad, up to the last non-zero byte
// (a valid frame holds non-zero bytes), for a valid frame written after bad
// had been durable. Finding one proves damage to acknowledged bytes: a
// *CorruptError.
func (w *window) confirmTorn(bad, last int64, maxRec int, reason string) error {
	for off := bad + frameAlign; off <= last && off+FrameHeaderSize <= w.size; off += frameAlign {
		_, synced, _, why, err := w.frameAt(off, maxRec)
		if err != nil {
			return err
		}
		if why == "" && synced > bad {
			return &CorruptError{Offset: bad, Reason: fmt.Sprintf("%s, and a valid record written later follows at offset %d", reason, off)}
		}
	}
	return nil
}
