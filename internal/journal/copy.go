package journal

import (
	"fmt"
	"io"
)

// PreallocSize reads the header of a segment file and returns the size it
// was preallocated to (0 if it was not, or its header is version 1). A
// sealed segment is cut to its records, but the newest segment of a
// journal must be at least that long (Open refuses a shorter one as cut):
// a copy of a journal that ends with a sealed segment pads it with zeros
// to this size, which reads as the free space of an active segment.
func PreallocSize(r io.ReaderAt) (int64, error) {
	b := make([]byte, HeaderSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return 0, fmt.Errorf("journal: read segment header: %w", err)
	}
	h, reason := decodeHeader(b)
	if reason != "" {
		return 0, fmt.Errorf("%w: segment header: %s", ErrCorrupt, reason)
	}
	return h.prealloc, nil
}
