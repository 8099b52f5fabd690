package retry

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestLimitValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		l    Limit
		want string // "" for valid
	}{
		{Limit{}, ""},
		{Limit{RateMilli: 100000, Burst: 10}, ""},
		{Limit{RateMilli: 1, Burst: 1}, ""},
		{Limit{RateMilli: MaxRateMilli, Burst: MaxBurst}, ""},
		{Limit{RateMilli: 0, Burst: 3}, "rate 0 per second"},
		{Limit{RateMilli: -5, Burst: 3}, "rate -0.005"},
		{Limit{RateMilli: MaxRateMilli + 1, Burst: 3}, "between 0.001 and 1000000"},
		{Limit{RateMilli: 1000, Burst: 0}, "burst 0"},
		{Limit{RateMilli: 1000, Burst: MaxBurst + 1}, "burst 1000001"},
	} {
		err := tt.l.Validate()
		if tt.want == "" {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tt.l, err)
			}
			continue
		}
		if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want ErrInvalidLimit mentioning %q", tt.l, err, tt.want)
		}
	}
}

// TestBucketTable walks a bucket of 100/s with burst 3 (one token every
// 10 ms) through takes and checks tokens, admission and the next token.
func TestBucketTable(t *testing.T) {
	t.Parallel()
	l := Limit{RateMilli: 100000, Burst: 3}
	if l.Interval() != 10000 {
		t.Fatalf("Interval = %d µs, want 10000", l.Interval())
	}
	var b Bucket
	steps := []struct {
		name       string
		now        int64
		take       bool
		tokens     int  // before the take
		admits     bool // before the take
		nextAdmit  int64
		tatAfterUS int64
	}{
		{"full", 1000, true, 3, true, 1000, 1010000},
		{"second of the burst", 1000, true, 2, true, 1000, 1020000},
		{"third of the burst", 1000, true, 1, true, 1000, 1030000},
		{"empty", 1000, false, 0, false, 1010, 1030000},
		{"a token back after 10 ms", 1010, true, 1, true, 1010, 1040000},
		{"empty again", 1015, false, 0, false, 1020, 1040000},
		{"a replayed start without a token still takes", 1015, true, 0, false, 1020, 1050000},
		{"full again after a quiet time", 5000, true, 3, true, 5000, 5010000},
	}
	for _, s := range steps {
		if got := b.Tokens(l, s.now); got != s.tokens {
			t.Fatalf("%s: Tokens = %d, want %d", s.name, got, s.tokens)
		}
		if got := b.Admits(l, s.now); got != s.admits {
			t.Fatalf("%s: Admits = %v, want %v", s.name, got, s.admits)
		}
		if got := b.NextAdmit(l, s.now); got != s.nextAdmit {
			t.Fatalf("%s: NextAdmit = %d, want %d", s.name, got, s.nextAdmit)
		}
		if s.take {
			b = b.Take(l, s.now)
		}
		if b.TAT != s.tatAfterUS {
			t.Fatalf("%s: TAT = %d, want %d", s.name, b.TAT, s.tatAfterUS)
		}
	}
	if !b.Full(5010) || b.Full(5009) {
		t.Fatalf("Full around TAT %d wrong", b.TAT)
	}
	var z Bucket
	if !z.Admits(Limit{}, 0) || z.Take(Limit{}, 99) != z || z.Tokens(Limit{}, 0) != 0 {
		t.Fatal("the zero Limit must admit always and leave the bucket alone")
	}
}

// TestBucketWindowLaw: a bucket that starts whatever it admits, offered an
// attempt at random times, never starts more than Burst + d·rate in any
// span of d ms (checked for every window of 1 s).
func TestBucketWindowLaw(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		l := Limit{RateMilli: rapid.Int64Range(1000, 2_000_000).Draw(t, "rate"), Burst: rapid.IntRange(1, 20).Draw(t, "burst")}
		var b Bucket
		now := rapid.Int64Range(0, 1<<40).Draw(t, "start")
		var starts []int64
		for range rapid.IntRange(1, 3000).Draw(t, "offers") {
			now += rapid.Int64Range(0, 7).Draw(t, "dt")
			if b.Admits(l, now) {
				b = b.Take(l, now)
				starts = append(starts, now)
			} else if n := b.NextAdmit(l, now); n <= now || !b.Admits(l, n) || (n > now+1 && b.Admits(l, n-1)) {
				t.Fatalf("NextAdmit(%d) = %d: not the first ms with a token", now, n)
			}
		}
		bound := int64(l.Burst) + 1000*1000/l.Interval() + 1
		j := 0
		for i := range starts {
			for starts[i]-starts[j] >= 1000 {
				j++
			}
			if int64(i-j+1) > bound {
				t.Fatalf("%d starts in [%d, %d], more than burst %d + 1 s of rate %d/1000", i-j+1, starts[j], starts[i], l.Burst, l.RateMilli)
			}
		}
	})
}

// TestRampTable walks a slow start to 8 through admissions and outcomes.
func TestRampTable(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 1, Probes: 1, SlowStart: 8}
	r := BeginRamp(c)
	if r != (Ramp{Window: 1}) {
		t.Fatalf("BeginRamp = %+v, want window 1", r)
	}
	if !r.Admits() {
		t.Fatal("a new ramp admits one")
	}
	r = r.Start()
	if r.Admits() || r.Busy != 1 {
		t.Fatalf("ramp %+v admits a second attempt with a window of 1", r)
	}
	r = r.End(c, true) // window 2
	if r != (Ramp{Window: 2}) {
		t.Fatalf("after a success: %+v, want window 2, busy 0", r)
	}
	r = r.Start().Start()
	if r.Admits() {
		t.Fatal("window 2 full")
	}
	r = r.End(c, false) // a failure frees its place, no widening
	if r != (Ramp{Window: 2, Busy: 1}) {
		t.Fatalf("after a failure: %+v", r)
	}
	r = r.End(c, true).Start().Start().Start() // window 3, 3 busy
	if r != (Ramp{Window: 3, Busy: 3}) || r.Admits() {
		t.Fatalf("ramp %+v", r)
	}
	for range 4 {
		r = r.End(c, true) // 4, 5, 6, 7 (busy floors at 0)
	}
	if r != (Ramp{Window: 7}) {
		t.Fatalf("ramp %+v, want window 7, busy 0", r)
	}
	if r = r.End(c, true); !r.IsZero() {
		t.Fatalf("ramp %+v at SlowStart 8: want it over", r)
	}
	if !r.Admits() || r.Start() != r {
		t.Fatal("the zero Ramp admits everything and counts nothing")
	}
	if BeginRamp(Circuit{SlowStart: 1}) != (Ramp{}) || BeginRamp(Circuit{}) != (Ramp{}) {
		t.Fatal("SlowStart 0 or 1 is no slow start")
	}
}

// TestRampDoublesPerRound: with every admitted attempt succeeding in
// rounds, the attempts in flight per round go 1, 2, 4, 8, … up to the end.
func TestRampDoublesPerRound(t *testing.T) {
	t.Parallel()
	c := Circuit{SlowStart: 64}
	r := BeginRamp(c)
	var curve []int
	for !r.IsZero() {
		n := 0
		for r.Admits() {
			r = r.Start()
			n++
		}
		curve = append(curve, n)
		for range n {
			r = r.End(c, true)
		}
	}
	want := []int{1, 2, 4, 8, 16, 32}
	if len(curve) != len(want) {
		t.Fatalf("curve %v, want %v", curve, want)
	}
	for i := range want {
		if curve[i] != want[i] {
			t.Fatalf("curve %v, want %v", curve, want)
		}
	}
}
