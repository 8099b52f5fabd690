package walk

import (
	"context"
	"errors"
	"testing"
)

// listing pages through the ids 1..n, ascending, with pages of at most
// limit (and at most short, when short > 0); it counts the calls and the
// items handed out.
type listing struct {
	n, short      int
	calls, served int
	limits        []int
}

func (l *listing) page(_ context.Context, after uint64, limit int) ([]uint64, uint64, error) {
	l.calls++
	l.limits = append(l.limits, limit)
	if l.short > 0 {
		limit = min(limit, l.short)
	}
	var out []uint64
	for id := after + 1; id <= uint64(l.n) && len(out) < limit; id++ {
		out = append(out, id)
	}
	l.served += len(out)
	if len(out) == 0 || out[len(out)-1] == uint64(l.n) {
		return out, 0, nil
	}
	return out, out[len(out)-1], nil
}

func TestCollect(t *testing.T) {
	t.Parallel()
	even := func(id uint64) bool { return id%2 == 0 }
	tests := []struct {
		name            string
		n, short        int
		max, scan       int
		match           func(uint64) bool
		want            int
		over, cut       bool
		served, maxSeen int // items handed out at most; the largest limit asked
	}{
		{"all under max", 2500, 0, 5000, 0, nil, 2500, false, false, 2500, PageSize},
		{"exactly max", 2000, 0, 2000, 0, nil, 2000, false, false, 2000, PageSize},
		{"over max stops at once", 5000, 0, 1500, 0, nil, 1500, true, false, 2000, PageSize},
		{"matches among many", 3000, 0, 10000, 0, even, 1500, false, false, 3000, PageSize},
		{"scan bound cuts", 5000, 0, 10000, 1200, even, 600, false, true, 1200, PageSize},
		{"scan bound asks no more than it may see", 5000, 0, 10000, 300, nil, 300, false, true, 300, 300},
		{"scan bound at the end is no cut", 1200, 0, 10000, 1200, nil, 1200, false, false, 1200, PageSize},
		{"short pages", 50, 7, 10000, 0, nil, 50, false, false, 50, PageSize},
		{"empty", 0, 0, 10, 0, nil, 0, false, false, 0, PageSize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := &listing{n: tc.n, short: tc.short}
			res, err := Collect(context.Background(), tc.max, tc.scan, l.page, tc.match)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Items) != tc.want || res.Over != tc.over || res.Cut != tc.cut {
				t.Fatalf("got %d items, over %v, cut %v; want %d, %v, %v", len(res.Items), res.Over, res.Cut, tc.want, tc.over, tc.cut)
			}
			for i := 1; i < len(res.Items); i++ {
				if res.Items[i] <= res.Items[i-1] {
					t.Fatalf("items out of order at %d: %v", i, res.Items[i-1:i+1])
				}
			}
			if l.served > tc.served {
				t.Fatalf("the listing handed out %d items, want at most %d", l.served, tc.served)
			}
			for _, lim := range l.limits {
				if lim > tc.maxSeen || lim <= 0 {
					t.Fatalf("asked for a page of %d, want 1..%d", lim, tc.maxSeen)
				}
			}
		})
	}
}

func TestWalkStops(t *testing.T) {
	t.Parallel()
	l := &listing{n: 5000}
	visited := 0
	cut, err := Walk(context.Background(), 0, l.page, func(uint64) bool { visited++; return visited < 10 })
	if err != nil || cut || visited != 10 || l.calls != 1 {
		t.Fatalf("visit returning false: cut %v, err %v, visited %d, calls %d", cut, err, visited, l.calls)
	}
	boom := errors.New("boom")
	if _, err := Walk(context.Background(), 0, func(context.Context, uint64, int) ([]uint64, uint64, error) { return nil, 0, boom }, func(uint64) bool { return true }); !errors.Is(err, boom) {
		t.Fatalf("a page's error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Walk(ctx, 0, l.page, func(uint64) bool { return true }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}
