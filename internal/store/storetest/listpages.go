package storetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// testListKindAndKeyPages walks every page of the kind filter and of the
// key-prefix search (alone, together, with a state), in both orders and in
// pages of several sizes, over jobs in mixed states: each walk returns
// every match exactly once, in order, and no page but the last is short.
// A rare kind sits at both ends of the ids, and a key starts with the
// digits of another job's id, which the search also matches.
func testListKindAndKeyPages(t *testing.T, open Opener) {
	s := openDefault(t, open)
	type row struct {
		id               uint64
		kind, key, state string
	}
	var rows []row
	add := func(i int, key string) {
		kind := "bulk"
		switch {
		case i < 3 || i == 199:
			kind = "rare"
		case i%7 == 0:
			kind = "mid"
		}
		sp := spec(kind, "t")
		sp.Policy, sp.Key = policy(1), key
		rows = append(rows, row{id: enqueueOne(t, s, T0, T0+int64(i), sp), kind: kind, key: key, state: "pending"})
	}
	for i := range 200 {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("cust-%d-%03d", i%3, i)
		}
		if i == 150 {
			key = uintString(rows[12].id) + "-order"
		}
		add(i, key)
	}
	byID := map[uint64]*row{}
	for i := range rows {
		byID[rows[i].id] = &rows[i]
	}
	cs := claim(t, s, T0+1000, store.Limits{Max: 40})
	var outs []store.Outcome
	for i, c := range cs {
		switch i % 3 {
		case 0:
			outs = append(outs, outcome(c, retry.Success, ""))
			byID[c.ID].state = "succeeded"
		case 1:
			outs = append(outs, outcome(c, retry.Permanent, "no"))
			byID[c.ID].state = "failed"
		default:
			byID[c.ID].state = "running"
		}
	}
	finish(t, s, T0+1001, outs...)

	filters := []store.Filter{
		{Kind: "rare"}, {Kind: "mid"}, {Kind: "bulk"}, {Kind: "none"},
		{Kind: "bulk", State: "pending"}, {Kind: "mid", State: "succeeded"}, {Kind: "rare", State: "failed"},
		{Search: "cust-"}, {Search: "cust-1"}, {Search: "cust-2-1"}, {Search: "cust-9"},
		{Search: uintString(rows[12].id)}, {Kind: "bulk", Search: "cust-0"}, {Search: "cust-", State: "running"},
	}
	for _, f := range filters {
		var want []uint64
		for _, r := range rows {
			if (f.Kind == "" || r.kind == f.Kind) && (f.State == "" || r.state == f.State) &&
				(f.Search == "" || strings.HasPrefix(r.key, f.Search) || uintString(r.id) == f.Search) {
				want = append(want, r.id)
			}
		}
		for _, oldest := range []bool{true, false} {
			f.Oldest = oldest
			w := slices.Clone(want)
			if !oldest {
				slices.Reverse(w)
			}
			for _, n := range []int{1, 7, 50} {
				if got := listAll(t, s, f, n); !slices.Equal(got, w) {
					t.Errorf("List %+v in pages of %d: %v, want %v", f, n, got, w)
				}
			}
		}
	}
}
