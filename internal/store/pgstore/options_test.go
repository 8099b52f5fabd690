package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestUnsafeLeasesRefused: Open refuses a heartbeat shorter than a renewal
// can take and a lease that spans fewer than MinLeaseHeartbeats
// heartbeats, before it connects, with an error that states the safe
// range; the defaults derived from a lease alone are safe.
func TestUnsafeLeasesRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name             string
		lease, heartbeat time.Duration
		want             []string // in the error; nil: accepted
	}{
		{"the issue's 2ms lease, 1ms heartbeat", 2 * time.Millisecond, time.Millisecond, []string{"Lease 2ms is below 300ms", "set Lease to 300ms or more", "Heartbeat between 100ms and Lease/3"}},
		{"heartbeat below the floor", time.Second, 50 * time.Millisecond, []string{"Heartbeat 50ms with Lease 1s is unsafe", "between 100ms and 333.333333ms"}},
		{"lease of two heartbeats", 2 * time.Second, time.Second, []string{"Heartbeat 1s with Lease 2s is unsafe", "span 3 heartbeats", "between 100ms and 666.666666ms"}},
		{"heartbeat at or above the lease", time.Second, time.Second, []string{"Heartbeat 1s with Lease 1s is unsafe"}},
		{"lease alone below the floor", 200 * time.Millisecond, 0, []string{"Lease 200ms is below 300ms"}},
		{"the shortest safe lease", 300 * time.Millisecond, 100 * time.Millisecond, nil},
		{"a lease alone gets a safe heartbeat", 300 * time.Millisecond, 0, nil},
		{"a 1s lease alone", time.Second, 0, nil},
		{"the defaults", 0, 0, nil},
		{"an hour's lease alone", time.Hour, 0, nil},
	} {
		o := Options{Lease: c.lease, Heartbeat: c.heartbeat}.withDefaults()
		err := o.validate()
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: refused: %v", c.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: Lease %v, Heartbeat %v accepted", c.name, o.Lease, o.Heartbeat)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		// Open refuses it before it connects (the URL is never dialled).
		if _, oerr := Open(context.Background(), "postgres://nobody@127.0.0.1:1/none", Options{Lease: c.lease, Heartbeat: c.heartbeat}); oerr == nil || oerr.Error() != err.Error() {
			t.Errorf("%s: Open: %v, want %v", c.name, oerr, err)
		}
	}
	if o := (Options{}).withDefaults(); o.Lease != 5*time.Second || o.Heartbeat != time.Second {
		t.Errorf("defaults: Lease %v, Heartbeat %v; want 5s, 1s", o.Lease, o.Heartbeat)
	}
	if o := (Options{Lease: time.Second}).withDefaults(); o.Heartbeat != 200*time.Millisecond {
		t.Errorf("Lease 1s alone: Heartbeat %v, want 200ms", o.Heartbeat)
	}
}
