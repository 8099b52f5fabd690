// Package walk pages through a listing with bounds: the one loop behind
// every action over the jobs of a filter (the library's ReplayMatching and
// DiscardMatching, the dashboard's actions over a filter or a group and its
// grouping of failed jobs, the CLI's retry, cancel and discard by filter).
// A page comes from whatever lists (the runner, or the HTTP API for the
// CLI); the walk asks for pages of at most PageSize items, from cursor 0,
// and never looks at more items than its bound.
package walk

import "context"

// PageSize is the largest page a walk asks for (the largest the runner
// and the HTTP API answer).
const PageSize = 1000

// Page reads the page of at most limit items after cursor after (0: the
// first) and returns the cursor of the next page, 0 after the last. A page
// may be short, even empty, with a next cursor.
type Page[T any] func(ctx context.Context, after uint64, limit int) (items []T, next uint64, err error)

// Walk calls visit for every item of every page, in order, until the last
// page, until visit returns false, or once scan items were visited (scan
// <= 0: no bound). cut reports that it stopped on the scan bound with
// items left: a page was still to come.
func Walk[T any](ctx context.Context, scan int, page Page[T], visit func(T) bool) (cut bool, err error) {
	seen := 0
	for after := uint64(0); ; {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		limit := PageSize
		if scan > 0 {
			limit = min(limit, scan-seen)
		}
		items, next, err := page(ctx, after, limit)
		if err != nil {
			return false, err
		}
		for _, it := range items {
			if !visit(it) {
				return false, nil
			}
		}
		seen += len(items)
		if next == 0 {
			return false, nil
		}
		if scan > 0 && seen >= scan {
			return true, nil
		}
		after = next
	}
}

// Result is what Collect found.
type Result[T any] struct {
	// Items are the items match accepted, in the listing's order: at most
	// the max Collect was given.
	Items []T
	// Over: more than max items match (Items holds the first max).
	Over bool
	// Cut: the scan bound stopped the walk with items left unseen.
	Cut bool
}

// Collect walks the listing (see Walk, with its scan bound) and returns
// the items that match accepts (nil match: every item), at most max of
// them; it stops at the first match beyond max and reports it with Over.
func Collect[T any](ctx context.Context, max, scan int, page Page[T], match func(T) bool) (Result[T], error) {
	var res Result[T]
	cut, err := Walk(ctx, scan, page, func(it T) bool {
		if match != nil && !match(it) {
			return true
		}
		if len(res.Items) == max {
			res.Over = true
			return false
		}
		res.Items = append(res.Items, it)
		return true
	})
	res.Cut = cut
	return res, err
}
