package pgstore

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/runlog/runlog/internal/state"
)

// metadataJSON returns a job's metadata as the metadata column holds it: a
// JSON object of strings, or nil (NULL) for none.
func metadataJSON(md []state.Meta) []byte {
	if len(md) == 0 {
		return nil
	}
	m := make(map[string]string, len(md))
	for _, e := range md {
		m[e.Key] = e.Value
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return b
}

// readMetadata reads a metadata column (nil for NULL) into the state's
// form: sorted by key.
func readMetadata(b []byte) ([]state.Meta, error) {
	if b == nil {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("metadata column is not a JSON object of strings: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	out := make([]state.Meta, 0, len(m))
	for k, v := range m {
		out = append(out, state.Meta{Key: k, Value: v})
	}
	slices.SortFunc(out, func(a, b state.Meta) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}
