package embedded

import (
	"strconv"

	"github.com/runlog/runlog/internal/state"
)

// maxMemorySearch bounds the keys in memory one search collects through
// the ordered keys; a prefix more keys start with is answered by the scan
// in id order, which then meets a match every few jobs at most on
// average (more than maxMemorySearch of the jobs in memory match).
const maxMemorySearch = 4096

// searchMemoryLocked returns the walk over the jobs in memory that a search
// for q can match: those whose key starts with q, read from the ordered
// keys, and, when q is digits, the job whose id it is. It returns nil when
// more than maxMemorySearch keys start with q. s.mu must be held.
func (s *Store) searchMemoryLocked(q string, digits bool) func(func(*state.Job) bool) {
	var hits []*state.Job
	over := false
	s.st.KeyPrefix(q, func(_ string, j *state.Job) bool {
		if len(hits) == maxMemorySearch {
			over = true
			return false
		}
		hits = append(hits, j)
		return true
	})
	if over {
		return nil
	}
	if digits {
		if id, err := strconv.ParseUint(q, 10, 64); err == nil {
			if j, ok := s.st.Job(id); ok {
				hits = append(hits, j) // a duplicate is compacted by the caller
			}
		}
	}
	return func(fn func(*state.Job) bool) {
		for _, j := range hits {
			if !fn(j) {
				return
			}
		}
	}
}
