package runlogtest

import (
	"slices"
	"sync"
	"time"
)

// Start is the time a new Clock shows: 2023-11-14 22:13:20 UTC.
var Start = time.UnixMilli(1_700_000_000_000).UTC()

// Clock is a runlog.Clock that moves only when Advance moves it. It is
// safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  map[*timer]struct{}
	changed chan struct{} // closed (and dropped) when a timer is set; see Timers
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock at Start.
func NewClock() *Clock { return NewClockAt(Start) }

// NewClockAt returns a clock at t.
func NewClockAt(t time.Time) *Clock { return &Clock{now: t, timers: map[*timer]struct{}{}} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a channel that receives once the clock has been
// advanced by d, and a func that stops the timer.
func (c *Clock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t.ch, func() bool { return false }
	}
	c.timers[t] = struct{}{}
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
	return t.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.timers[t]
		delete(c.timers, t)
		return ok
	}
}

// Advance moves the clock forward by d (d < 0 is ignored) and fires the
// timers that are due.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
			delete(c.timers, t)
		}
	}
}

// Step moves Now by d (either way) without moving the clock the timers run
// on, as an NTP step or a resumed VM does: a timer still fires once
// Advance has moved the clock by the duration it was set for.
func (c *Clock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for t := range c.timers {
		t.at = t.at.Add(d)
	}
}

// Timers returns when the timers set now fire, and a channel that is
// closed when a timer is set next. A goroutine of the runner that waits on
// the clock shows by setting a timer that it has done its work: a test
// that must know it waits until Timers says so.
func (c *Clock) Timers() ([]time.Time, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := make([]time.Time, 0, len(c.timers))
	for t := range c.timers {
		at = append(at, t.at)
	}
	slices.SortFunc(at, time.Time.Compare)
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return at, c.changed
}
