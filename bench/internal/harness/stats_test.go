package harness

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ten := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		name   string
		sorted []int64
		q      float64
		want   int64
	}{
		{"empty", nil, 0.5, 0},
		{"one", []int64{42}, 0.99, 42},
		{"p0 is the min", ten, 0, 1},
		{"p50 of ten", ten, 0.5, 5},
		{"p90 of ten", ten, 0.9, 9},
		{"p99 of ten", ten, 0.99, 10},
		{"p100 is the max", ten, 1, 10},
		{"p1 of ten", ten, 0.01, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.q); got != tt.want {
				t.Fatalf("Percentile(%v, %v) = %d, want %d", tt.sorted, tt.q, got, tt.want)
			}
		})
	}
}

func TestRate(t *testing.T) {
	if got := Rate(1000, 2*time.Second); got != 500 {
		t.Fatalf("Rate(1000, 2s) = %v, want 500", got)
	}
	if got := Rate(1000, 0); got != 0 {
		t.Fatalf("Rate(1000, 0) = %v, want 0", got)
	}
}

func TestSamplesDropsPastCapacity(t *testing.T) {
	s := newSamples(100)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				s.add(int64(g*50 + i))
			}
		})
	}
	wg.Wait()
	got := s.sorted()
	if len(got) != 100 || s.dropped.Load() != 100 {
		t.Fatalf("kept %d, dropped %d; want 100 and 100", len(got), s.dropped.Load())
	}
	if !slices.IsSorted(got) {
		t.Fatalf("sorted() is not sorted: %v", got)
	}
}

func TestCountLedger(t *testing.T) {
	tests := []struct {
		name string
		n    int
		done []int64
		want LedgerCounts
	}{
		{"all once", 3, []int64{2, 0, 1}, LedgerCounts{}},
		{"one lost", 3, []int64{0, 2}, LedgerCounts{Lost: 1}},
		{"twice counts a job once however often it repeats", 3, []int64{0, 1, 1, 1, 2, 2}, LedgerCounts{Twice: 2}},
		{"unknown ids", 2, []int64{0, 1, 2, -1}, LedgerCounts{Unknown: 2}},
		{"nothing done", 2, nil, LedgerCounts{Lost: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CountLedger(tt.n, tt.done); got != tt.want {
				t.Fatalf("CountLedger = %+v, want %+v", got, tt.want)
			}
		})
	}
}
