package authlimit

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// clock is a clock the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Now()} }

func wrong() bool { return false }
func right() bool { return true }

func TestDoublingWait(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := New(clk.now)
	const addr = "192.0.2.7:4000"
	for i := range Budget {
		if ok, wait := l.Check(addr, wrong); ok || wait != 0 {
			t.Fatalf("wrong token %d within the budget: %v, wait %v", i+1, ok, wait)
		}
	}
	for _, want := range []time.Duration{1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300} {
		want *= time.Second
		if _, wait := l.Check(addr, wrong); wait != 0 {
			t.Fatalf("a wrong token after the wait was not checked (wait %v)", wait)
		}
		if ok, wait := l.Check(addr, right); ok || wait != want {
			t.Fatalf("right token during the wait: %v, wait %v; want not checked, %v", ok, wait, want)
		}
		clk.advance(want)
	}
	if ok, _ := l.Check(addr, right); !ok {
		t.Fatal("the right token after the wait was refused")
	}
	// Another address is unaffected.
	if ok, wait := l.Check("192.0.2.8:1", right); !ok || wait != 0 {
		t.Errorf("another address: %v, wait %v", ok, wait)
	}
}

func TestGlobalCap(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := New(clk.now)
	if ok, _ := l.Check("198.51.100.1:1", right); !ok {
		t.Fatal("right token refused")
	}
	for i := range GlobalBurst {
		if _, wait := l.Check(fmt.Sprintf("10.0.%d.%d:1", i/250, i%250), wrong); wait != 0 {
			t.Fatalf("wrong token %d of the burst was not checked", i+1)
		}
	}
	if ok, wait := l.Check("203.0.113.1:1", right); ok || wait != GlobalRefill {
		t.Errorf("a new address once the burst is spent: %v, wait %v; want %v", ok, wait, GlobalRefill)
	}
	if ok, wait := l.Check("198.51.100.1:2", right); !ok || wait != 0 {
		t.Errorf("an address that sent the right token: %v, wait %v; want checked", ok, wait)
	}
	clk.advance(GlobalRefill)
	if ok, _ := l.Check("203.0.113.1:1", right); !ok {
		t.Error("a new address once the bucket refilled: refused")
	}
	// The exemption ends GoodFor after the last right token.
	for range GlobalBurst {
		l.Check("10.9.9.9:1", wrong)
		clk.advance(time.Millisecond)
	}
	clk.advance(GoodFor)
	for i := range GlobalBurst + 1 {
		l.Check(fmt.Sprintf("10.1.%d.%d:1", i/250, i%250), wrong)
	}
	if _, wait := l.Check("198.51.100.1:2", right); wait == 0 {
		t.Error("an address whose right token is older than GoodFor is exempt from the global cap")
	}
}

func TestTablesBounded(t *testing.T) {
	t.Parallel()
	clk := newClock()
	l := New(clk.now)
	for i := range MaxClients + 100 {
		key := fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
		l.Fail(key)
		l.Succeed(key)
		clk.advance(time.Millisecond)
	}
	if len(l.bad) > MaxClients || len(l.good) > MaxClients {
		t.Errorf("%d wrong and %d right addresses remembered, want at most %d each", len(l.bad), len(l.good), MaxClients)
	}
	clk.advance(GoodFor)
	l.Fail("192.0.2.1")
	l.Succeed("192.0.2.1")
	if len(l.bad) != 1 || len(l.good) != 1 {
		t.Errorf("after a day %d wrong and %d right addresses remembered, want the new one only", len(l.bad), len(l.good))
	}
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	l := New(nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				l.Check(fmt.Sprintf("10.0.%d.%d:1", g, i%200), func() bool { return i%2 == 0 })
			}
		}()
	}
	wg.Wait()
}

func TestNilLimiter(t *testing.T) {
	t.Parallel()
	var l *Limiter
	if ok, wait := l.Check("x", right); !ok || wait != 0 {
		t.Error("a nil limiter refused the right token")
	}
	l.Fail("x")
	l.Succeed("x")
	if l.Wait("x") != 0 {
		t.Error("a nil limiter made an address wait")
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:5555":           "127.0.0.1",
		"[::ffff:10.0.0.1]:1":      "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:1": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:80":  "2001:db8:1:2::/64",
		"not an address":           "not an address",
	} {
		if got := ClientKey(in); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{time.Millisecond: "1", time.Second: "1", 1500 * time.Millisecond: "2", 5 * time.Minute: "300"} {
		if got := RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%v) = %q, want %q", d, got, want)
		}
	}
}
