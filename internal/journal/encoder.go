package journal

import (
	"encoding/binary"
	"hash/crc32"
	"math"
)

// appendHeader appends the header of segment index, whose first record has
// sequence number firstSeq, to dst, for a segment that is not preallocated.
func appendHeader(dst []byte, index, firstSeq uint64) []byte {
	return appendHeaderSized(dst, index, firstSeq, 0)
}

// appendHeaderSized appends the header of segment index, whose first record
// has sequence number firstSeq and whose file was zero-filled to prealloc
// bytes before it was published (0: not preallocated; sizes that do not
// fit the 32-bit field are recorded as 0), to dst.
func appendHeaderSized(dst []byte, index, firstSeq uint64, prealloc int64) []byte {
	if prealloc < HeaderSize || prealloc > math.MaxUint32 {
		prealloc = 0
	}
	start := len(dst)
	dst = append(dst, Magic...)
	dst = binary.LittleEndian.AppendUint32(dst, Version)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(prealloc))
	dst = binary.LittleEndian.AppendUint64(dst, index)
	dst = binary.LittleEndian.AppendUint64(dst, firstSeq)
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:start+32], crcTable))
	return binary.LittleEndian.AppendUint32(dst, 0)
}

// frameSize is the size on disk of the frame of an n-byte record.
func frameSize(n int) int {
	return FrameHeaderSize + (n+frameAlign-1)&^(frameAlign-1)
}

// appendFrame appends the frame of rec to dst. synced is the segment size
// that was durable when this frame's group commit began. The caller has
// checked len(rec) against the maximum.
func appendFrame(dst, rec []byte, synced int64) []byte {
	start := len(dst)
	n := frameSize(len(rec))
	dst = growLen(dst, n)
	f := dst[start:]
	binary.LittleEndian.PutUint32(f[0:4], uint32(len(rec)))
	binary.LittleEndian.PutUint64(f[8:16], uint64(synced))
	copy(f[16:], rec)
	clear(f[16+len(rec):])
	binary.LittleEndian.PutUint32(f[4:8], frameCRC(f))
	return dst
}

// frameCRC computes the checksum of a whole frame f: the length field and
// everything from the synced offset to the end of the padding.
func frameCRC(f []byte) uint32 {
	return crc32.Update(crc32.Checksum(f[0:4], crcTable), crcTable, f[8:])
}

// growLen extends b by n bytes, reusing its capacity when it can. The new
// bytes are not cleared.
func growLen(b []byte, n int) []byte {
	if len(b)+n > cap(b) {
		nb := make([]byte, len(b), 2*cap(b)+n)
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}
