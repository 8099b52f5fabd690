package retry

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
		want string // "" = valid; else a fragment of the error
	}{
		{"default", DefaultPolicy(), ""},
		{"one attempt no backoff", Policy{Attempts: 1}, ""},
		{"zero attempts", Policy{Attempts: 0, BaseMS: 1, CapMS: 1}, "Attempts is 0"},
		{"negative attempts", Policy{Attempts: -3}, "Attempts is -3"},
		{"negative base", Policy{Attempts: 1, BaseMS: -1}, "BaseMS is -1"},
		{"cap below base", Policy{Attempts: 1, BaseMS: 10, CapMS: 9}, "CapMS (9) is below BaseMS (10)"},
		{"negative deadline", Policy{Attempts: 1, DeadlineMS: -1}, "DeadlineMS is -1"},
		{"deadline", Policy{Attempts: 1, DeadlineMS: 1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidPolicy mentioning %q", err, tt.want)
			}
		})
	}
}

func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	if got, want := DefaultPolicy(), (Policy{Attempts: 10, BaseMS: 500, CapMS: 30000}); got != want {
		t.Fatalf("DefaultPolicy() = %+v, want %+v", got, want)
	}
}

func TestBudgetFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		p        Policy
		fails    int
		firstDue int64
		want     Budget
	}{
		{"fresh, no deadline", Policy{Attempts: 3}, 0, 1000, Budget{Left: 3}},
		{"two failed", Policy{Attempts: 3}, 2, 1000, Budget{Left: 1}},
		{"spent", Policy{Attempts: 3}, 3, 1000, Budget{Left: 0}},
		{"over-spent truncates", Policy{Attempts: 3}, 7, 1000, Budget{Left: 0}},
		{"negative fails count as 0", Policy{Attempts: 3}, -2, 1000, Budget{Left: 3}},
		{"deadline from first due", Policy{Attempts: 3, DeadlineMS: 1500}, 1, 1000, Budget{Left: 2, Deadline: 2500, HasDeadline: true}},
		{"deadline saturates", Policy{Attempts: 1, DeadlineMS: 10}, 0, math.MaxInt64 - 5, Budget{Left: 1, Deadline: math.MaxInt64, HasDeadline: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BudgetFor(tt.p, tt.fails, tt.firstDue); got != tt.want {
				t.Fatalf("BudgetFor = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestDelaySequence: base 500 ms, cap 30 s doubles from 500 ms and stays
// at the cap (docs/semantics.md, "Backoff").
func TestDelaySequence(t *testing.T) {
	t.Parallel()
	p := Policy{Attempts: 10, BaseMS: 500, CapMS: 30000}
	want := []int64{500, 1000, 2000, 4000, 8000, 16000, 30000, 30000}
	for n, w := range want {
		if got := Delay(p, n); got != w {
			t.Errorf("Delay(base 500, cap 30000, %d) = %d, want %d", n, got, w)
		}
	}
}

func TestDelayEdges(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    Policy
		n    int
		want int64
	}{
		{"negative n is 0", Policy{BaseMS: 500, CapMS: 30000}, -1, 500},
		{"zero base stays 0", Policy{BaseMS: 0, CapMS: 30000}, 40, 0},
		{"base equals cap", Policy{BaseMS: 700, CapMS: 700}, 3, 700},
		{"base above cap is capped", Policy{BaseMS: 900, CapMS: 700}, 0, 700},
		{"huge n ends at cap", Policy{BaseMS: 1, CapMS: 1 << 40}, math.MaxInt, 1 << 40},
		{"cap near max does not overflow", Policy{BaseMS: 3, CapMS: math.MaxInt64}, 70, math.MaxInt64},
		{"exact doubling to cap", Policy{BaseMS: 1, CapMS: 1 << 62}, 62, 1 << 62},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Delay(tt.p, tt.n); got != tt.want {
				t.Fatalf("Delay(%+v, %d) = %d, want %d", tt.p, tt.n, got, tt.want)
			}
		})
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d    int64
		r    uint32
		want int64
	}{
		{0, 12345, 0},
		{-10, 7, 0},
		{1, math.MaxUint32, 0}, // ⌊1/2⌋ = 0, so r mod 1 = 0
		{500, 0, 250},
		{500, 250, 500},       // the ceiling: 250 + 250 mod 251
		{500, 251, 250},       // wraps back to the floor
		{501, 250, 500},       // odd d: the maximum is d − 1
		{30000, 15000, 30000}, // cap reached exactly
		{30000, 7, 15007},
	}
	for _, tt := range tests {
		if got := Jitter(tt.d, tt.r); got != tt.want {
			t.Errorf("Jitter(%d, %d) = %d, want %d", tt.d, tt.r, got, tt.want)
		}
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	p := Policy{Attempts: 5, BaseMS: 500, CapMS: 30000}
	tests := []struct {
		name  string
		n     int
		after int64
		r     uint32
		want  int64
	}{
		{"no server wait: jittered backoff", 2, -1, 0, 1000},
		{"no server wait: ceiling", 2, -1, 1000, 2000},
		{"server wait used as is", 0, 1234, 99, 1234},
		{"server wait of zero", 3, 0, 99, 0},
		{"server wait above the cap used as is (issue 18)", 0, 120000, 0, 120000},
		{"server wait equal to cap", 0, 30000, 0, 30000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Wait(p, tt.n, tt.after, tt.r); got != tt.want {
				t.Fatalf("Wait(n=%d, after=%d, r=%d) = %d, want %d", tt.n, tt.after, tt.r, got, tt.want)
			}
		})
	}
}

func TestClassAndDenyStrings(t *testing.T) {
	t.Parallel()
	classes := map[Class]string{0: "class(0)", Success: "success", Retryable: "retryable", Permanent: "permanent", Unsafe: "unsafe", 9: "class(9)"}
	for c, want := range classes {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", uint8(c), got, want)
		}
	}
	denies := map[Deny]string{DenyNone: "none", DenyLate: "late", DenySpent: "spent", DenyOpen: "open", 7: "deny(7)"}
	for d, want := range denies {
		if got := d.String(); got != want {
			t.Errorf("Deny(%d).String() = %q, want %q", uint8(d), got, want)
		}
	}
}

func TestClassPredicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c             Class
		valid, failed bool
	}{
		{0, false, false},
		{Success, true, false},
		{Retryable, true, true},
		{Permanent, true, false}, // the target answered: not a breaker failure
		{Unsafe, true, true},
		{Unsafe + 1, false, false},
	}
	for _, tt := range tests {
		if got := tt.c.Valid(); got != tt.valid {
			t.Errorf("%v.Valid() = %v, want %v", tt.c, got, tt.valid)
		}
		if got := tt.c.BreakerFailed(); got != tt.failed {
			t.Errorf("%v.BreakerFailed() = %v, want %v", tt.c, got, tt.failed)
		}
	}
}

func TestAdmitOrder(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 500, Probes: 1}
	open := Breaker{State: Open, Until: 2000}
	tests := []struct {
		name       string
		br         Breaker
		b          Budget
		now        int64
		wantBr     Breaker
		wantBudget Budget
		wantDeny   Deny
	}{
		{"admitted takes one attempt", Breaker{}, Budget{Left: 2}, 100, Breaker{}, Budget{Left: 1}, DenyNone},
		{"last attempt", Breaker{}, Budget{Left: 1, Deadline: 200, HasDeadline: true}, 199, Breaker{}, Budget{Left: 0, Deadline: 200, HasDeadline: true}, DenyNone},
		{"late at the deadline", Breaker{}, Budget{Left: 2, Deadline: 200, HasDeadline: true}, 200, Breaker{}, Budget{Left: 2, Deadline: 200, HasDeadline: true}, DenyLate},
		{"late before spent", Breaker{}, Budget{Left: 0, Deadline: 200, HasDeadline: true}, 300, Breaker{}, Budget{Left: 0, Deadline: 200, HasDeadline: true}, DenyLate},
		{"late before open, breaker untouched", open, Budget{Left: 0, Deadline: 200, HasDeadline: true}, 3000, open, Budget{Left: 0, Deadline: 200, HasDeadline: true}, DenyLate},
		{"spent before open", open, Budget{Left: 0}, 100, open, Budget{Left: 0}, DenySpent},
		{"negative left is spent", Breaker{}, Budget{Left: -1}, 100, Breaker{}, Budget{Left: 0}, DenySpent},
		{"open refunds the attempt", open, Budget{Left: 3}, 1999, open, Budget{Left: 3}, DenyOpen},
		{"open past cooldown admits a probe", open, Budget{Left: 3}, 2000, Breaker{State: HalfOpen, Busy: 1}, Budget{Left: 2}, DenyNone},
		{"half-open full denies", Breaker{State: HalfOpen, Busy: 1}, Budget{Left: 3}, 5000, Breaker{State: HalfOpen, Busy: 1}, Budget{Left: 3}, DenyOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br, b, d := Admit(tt.br, c, tt.b, tt.now)
			if !breakerEqual(br, tt.wantBr) || b != tt.wantBudget || d != tt.wantDeny {
				t.Fatalf("Admit = (%+v, %+v, %v), want (%+v, %+v, %v)", br, b, d, tt.wantBr, tt.wantBudget, tt.wantDeny)
			}
		})
	}
}

func TestPlanAfter(t *testing.T) {
	t.Parallel()
	p := Policy{Attempts: 3, BaseMS: 500, CapMS: 30000}
	tests := []struct {
		name     string
		class    Class
		after    int64
		b        Budget
		n        int
		now      int64
		r        uint32
		wantWait int64
		wantStop bool
	}{
		{"success stops", Success, -1, Budget{Left: 2}, 0, 0, 0, 0, true},
		{"permanent stops", Permanent, -1, Budget{Left: 2}, 0, 0, 0, 0, true},
		{"unsafe stops", Unsafe, -1, Budget{Left: 2}, 0, 0, 0, 0, true},
		{"unknown class stops", 0, -1, Budget{Left: 2}, 0, 0, 0, 0, true},
		{"retryable waits the backoff", Retryable, -1, Budget{Left: 2}, 1, 0, 0, 500, false},
		{"retryable waits the jittered ceiling", Retryable, -1, Budget{Left: 2}, 1, 0, 500, 1000, false},
		{"retryable waits the server's time", Retryable, 700, Budget{Left: 1}, 0, 0, 0, 700, false},
		{"no attempt left stops", Retryable, -1, Budget{Left: 0}, 2, 0, 0, 0, true},
		{"deadline at the next try stops", Retryable, 700, Budget{Left: 2, Deadline: 1700, HasDeadline: true}, 0, 1000, 0, 0, true},
		{"deadline before the next try stops", Retryable, 700, Budget{Left: 2, Deadline: 1500, HasDeadline: true}, 0, 1000, 0, 0, true},
		{"deadline just after the next try waits", Retryable, 700, Budget{Left: 2, Deadline: 1701, HasDeadline: true}, 0, 1000, 0, 700, false},
		{"huge now saturates and stops", Retryable, 700, Budget{Left: 2, Deadline: math.MaxInt64, HasDeadline: true}, 0, math.MaxInt64 - 1, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, stop := PlanAfter(tt.class, tt.after, p, tt.b, tt.n, tt.now, tt.r)
			if w != tt.wantWait || stop != tt.wantStop {
				t.Fatalf("PlanAfter = (%d, %v), want (%d, %v)", w, stop, tt.wantWait, tt.wantStop)
			}
		})
	}
}

// TestAttemptsBound walks an example: with Attempts 3 a job gets at
// most three attempts: left 3→2 (wait), 2→1 (wait), 1→0 (stop).
func TestAttemptsBound(t *testing.T) {
	t.Parallel()
	p := Policy{Attempts: 3, BaseMS: 500, CapMS: 30000}
	fails, now, started := 0, int64(0), 0
	for {
		_, b, d := Admit(Breaker{}, DefaultCircuit(), BudgetFor(p, fails, 0), now)
		if d != DenyNone {
			if d != DenySpent {
				t.Fatalf("denied %v, want spent", d)
			}
			break
		}
		started++
		w, stop := PlanAfter(Retryable, -1, p, b, fails, now, 0)
		if stop {
			break
		}
		fails++
		now += w
	}
	if started != 3 {
		t.Fatalf("started %d attempts, want 3", started)
	}
}
