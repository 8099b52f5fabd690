package retry

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func breakerEqual(a, b Breaker) bool {
	return a.State == b.State && a.Until == b.Until && a.Busy == b.Busy && slices.Equal(a.Fails, b.Fails)
}

func TestCircuitValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		c    Circuit
		want string
	}{
		{"default", DefaultCircuit(), ""},
		{"minimal", Circuit{Threshold: 1, Probes: 1}, ""},
		{"zero threshold", Circuit{Threshold: 0, Probes: 1}, "Threshold is 0"},
		{"negative window", Circuit{Threshold: 1, WindowMS: -1, Probes: 1}, "WindowMS is -1"},
		{"negative cooldown", Circuit{Threshold: 1, CooldownMS: -1, Probes: 1}, "CooldownMS is -1"},
		{"zero probes livelock", Circuit{Threshold: 1, Probes: 0}, "Probes is 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidCircuit) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrInvalidCircuit mentioning %q", err, tt.want)
			}
		})
	}
	if got, want := DefaultCircuit(), (Circuit{Threshold: 5, WindowMS: 60000, CooldownMS: 30000, Probes: 1, SlowStart: 32}); got != want {
		t.Fatalf("DefaultCircuit() = %+v, want %+v", got, want)
	}
}

func TestBreakerStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[BreakerState]string{Closed: "closed", Open: "open", HalfOpen: "half-open", 5: "state(5)"} {
		if got := s.String(); got != want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}

// TestBreakerAdmit pins every admission row of the breaker table (docs/semantics.md).
func TestBreakerAdmit(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 2, WindowMS: 10000, CooldownMS: 300, Probes: 2}
	tests := []struct {
		name   string
		c      Circuit
		b      Breaker
		now    int64
		want   Breaker
		wantOK bool
	}{
		{"closed admits", c, Breaker{Fails: []int64{5}}, 10, Breaker{Fails: []int64{5}}, true},
		{"open denies before cooldown", c, Breaker{State: Open, Until: 1000}, 999, Breaker{State: Open, Until: 1000}, false},
		{"open probes after cooldown", c, Breaker{State: Open, Until: 1000}, 1000, Breaker{State: HalfOpen, Busy: 1}, true},
		{"half admits up to probes", c, Breaker{State: HalfOpen, Busy: 1}, 1001, Breaker{State: HalfOpen, Busy: 2}, true},
		{"half full denies", c, Breaker{State: HalfOpen, Busy: 2}, 1002, Breaker{State: HalfOpen, Busy: 2}, false},
		{"zero probes: half-open that denies (would deny forever)", Circuit{Threshold: 1}, Breaker{State: Open, Until: 1000}, 2000, Breaker{State: HalfOpen}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.b.Admit(tt.c, tt.now)
			if !breakerEqual(got, tt.want) || ok != tt.wantOK {
				t.Fatalf("Admit = (%+v, %v), want (%+v, %v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestBreakerDone pins every completion row of the breaker table and the
// window fixtures of the retry laws.
func TestBreakerDone(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 3, WindowMS: 1000, CooldownMS: 300, Probes: 1}
	tests := []struct {
		name   string
		c      Circuit
		b      Breaker
		now    int64
		failed bool
		want   Breaker
	}{
		{"closed success clears", c, Breaker{Fails: []int64{90, 80}}, 100, false, Breaker{}},
		{"closed failure under threshold", c, Breaker{Fails: []int64{90}}, 100, true, Breaker{Fails: []int64{100, 90}}},
		{"window trips", c, Breaker{Fails: []int64{90, 80}}, 100, true, Breaker{State: Open, Until: 400}},
		{"window expires", c, Breaker{Fails: []int64{500, 50}}, 1050, true, Breaker{Fails: []int64{1050, 500}}},
		{"window edge: now = t + window expires", c, Breaker{Fails: []int64{60, 50}}, 1050, true, Breaker{Fails: []int64{1050, 60}}},
		{"prune stops at the first expired entry", c, Breaker{Fails: []int64{900, -5, 950}}, 1000, true, Breaker{Fails: []int64{1000, 900}}},
		{"threshold 1 opens on the first failure", Circuit{Threshold: 1, CooldownMS: 5, Probes: 1}, Breaker{}, 7, true, Breaker{State: Open, Until: 12}},
		{"zero window keeps only the new failure", Circuit{Threshold: 2, Probes: 1}, Breaker{Fails: []int64{7}}, 7, true, Breaker{Fails: []int64{7}}},
		{"open ignores success", c, Breaker{State: Open, Until: 400}, 200, false, Breaker{State: Open, Until: 400}},
		{"open ignores failure", c, Breaker{State: Open, Until: 400}, 200, true, Breaker{State: Open, Until: 400}},
		{"half success closes", c, Breaker{State: HalfOpen, Busy: 1}, 500, false, Breaker{}},
		{"half failure opens", c, Breaker{State: HalfOpen, Busy: 1}, 500, true, Breaker{State: Open, Until: 800}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.Done(tt.c, tt.now, tt.failed)
			if !breakerEqual(got, tt.want) {
				t.Fatalf("Done = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBreakerNextAdmit(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 1, CooldownMS: 300, Probes: 1}
	tests := []struct {
		name string
		b    Breaker
		want int64
	}{
		{"open: its until", Breaker{State: Open, Until: 5000}, 5000},
		{"half-open full: now + cooldown", Breaker{State: HalfOpen, Busy: 1}, 1300},
		{"closed: now + cooldown", Breaker{}, 1300},
	}
	for _, tt := range tests {
		if got := tt.b.NextAdmit(c, 1000); got != tt.want {
			t.Errorf("%s: NextAdmit = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestBreakerIsZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		b    Breaker
		want bool
	}{
		{Breaker{}, true},
		{Breaker{Fails: []int64{}}, true},
		{Breaker{Fails: []int64{1}}, false},
		{Breaker{State: Open}, false},
		{Breaker{Until: 1}, false},
		{Breaker{Busy: 1}, false},
	}
	for _, tt := range tests {
		if got := tt.b.IsZero(); got != tt.want {
			t.Errorf("%+v.IsZero() = %v, want %v", tt.b, got, tt.want)
		}
	}
}

// TestBreakerDoneDoesNotAlias checks that Done copies on write: two
// breakers derived from one must not share a Fails array.
func TestBreakerDoneDoesNotAlias(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 10, WindowMS: 1000, CooldownMS: 300, Probes: 1}
	base := Breaker{Fails: make([]int64, 2, 16)}
	base.Fails[0], base.Fails[1] = 90, 80
	a := base.Done(c, 100, true)
	b := base.Done(c, 101, true)
	if !slices.Equal(base.Fails, []int64{90, 80}) {
		t.Fatalf("receiver changed: %v", base.Fails)
	}
	if !slices.Equal(a.Fails, []int64{100, 90, 80}) || !slices.Equal(b.Fails, []int64{101, 90, 80}) {
		t.Fatalf("derived breakers share state: a=%v b=%v", a.Fails, b.Fails)
	}
}

// TestBreakerOpenDenyProbeClose: Circuit{2, 10000, 300, 1} opens after 2
// failures, denies, and after 400 ms one probe closes it.
func TestBreakerOpenDenyProbeClose(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 2, WindowMS: 10000, CooldownMS: 300, Probes: 1}
	var b Breaker
	for i, now := range []int64{0, 50} {
		var ok bool
		if b, ok = b.Admit(c, now); !ok {
			t.Fatalf("attempt %d denied while closed", i)
		}
		b = b.Done(c, now, true)
	}
	if b.State != Open || b.Until != 350 {
		t.Fatalf("after 2 failures: %+v, want open until 350", b)
	}
	if _, ok := b.Admit(c, 100); ok {
		t.Fatal("open breaker admitted before its cooldown")
	}
	b, ok := b.Admit(c, 450)
	if !ok || b.State != HalfOpen {
		t.Fatalf("after the cooldown: %+v admitted=%v, want a half-open probe", b, ok)
	}
	if _, ok := b.Admit(c, 451); ok {
		t.Fatal("a second probe was admitted with Probes 1")
	}
	if b = b.Done(c, 460, false); !b.IsZero() {
		t.Fatalf("a successful probe left %+v, want closed", b)
	}
}

func TestReleaseFreesOnlyAHalfOpenProbe(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 1, WindowMS: 1000, CooldownMS: 100, Probes: 1}
	open := Breaker{}.Done(c, 0, true)
	half, ok := open.Admit(c, 100)
	if !ok || half.State != HalfOpen || half.Busy != 1 {
		t.Fatalf("after the cooldown: %+v %v", half, ok)
	}
	if _, ok := half.Admit(c, 100); ok {
		t.Fatal("a second probe was admitted while the first runs")
	}
	freed := half.Release()
	if freed.State != HalfOpen || freed.Busy != 0 {
		t.Fatalf("released probe: %+v", freed)
	}
	if _, ok := freed.Admit(c, 100); !ok {
		t.Fatal("no probe admitted after the interrupted one was released")
	}
	closed := Breaker{Fails: []int64{5}}
	if got := closed.Release(); got.State != Closed || len(got.Fails) != 1 {
		t.Fatalf("release changed a closed breaker: %+v", got)
	}
	if got := open.Release(); got.State != Open || got.Until != open.Until {
		t.Fatalf("release changed an open breaker: %+v", got)
	}
}

func TestBreakerAt(t *testing.T) {
	t.Parallel()
	c := Circuit{Threshold: 3, WindowMS: 1000, CooldownMS: 500, Probes: 1}
	open := Breaker{State: Open, Until: 2000}
	if got := open.At(c, 1999); got.State != Open || got.Until != 2000 {
		t.Errorf("open before Until: %+v", got)
	}
	if got := open.At(c, 2000); got.State != HalfOpen || got.Busy != 0 {
		t.Errorf("open at Until: %+v; want half-open, no probe busy", got)
	}
	closed := Breaker{Fails: []int64{1500, 900, 200}}
	if got := closed.At(c, 1850); len(got.Fails) != 2 || got.Fails[0] != 1500 || got.Fails[1] != 900 {
		t.Errorf("closed at 1850: %+v; want the 2 failures inside the window", got)
	}
	if len(closed.Fails) != 3 {
		t.Errorf("At changed its receiver: %+v", closed)
	}
	half := Breaker{State: HalfOpen, Busy: 1}
	if got := half.At(c, 1e9); got.State != HalfOpen || got.Busy != 1 {
		t.Errorf("half-open: %+v", got)
	}
}
