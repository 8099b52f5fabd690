package dashboard

import (
	"net"
	"sync"
	"time"
)

// Limits of the throttle on wrong tokens (login form and bearer header).
const (
	// throttleBudget is the number of wrong tokens a client address may
	// send before it has to wait.
	throttleBudget = 5
	// throttleBase is the first wait after the budget; each further wrong
	// token doubles it, up to throttleMaxWait.
	throttleBase    = time.Second
	throttleMaxWait = 5 * time.Minute
	// throttleForget is how long after its last wrong token an address
	// starts afresh.
	throttleForget = 30 * time.Minute
	// throttleMaxClients bounds the per-address table.
	throttleMaxClients = 10000
	// globalBurst wrong tokens from all addresses together are allowed at
	// once, then one per globalRefill: many addresses cannot guess faster.
	globalBurst  = 60
	globalRefill = 2 * time.Second
)

// throttle slows down guessing of the token: per client address a budget
// of wrong tokens and then a doubling wait, and a token bucket over all
// addresses together. Only wrong tokens count; a right one is never
// delayed unless its address (or everyone, under the global cap) is made
// to wait. Memory is bounded by throttleMaxClients.
type throttle struct {
	now func() time.Time

	mu      sync.Mutex
	clients map[string]*client
	tokens  float64   // the global bucket
	filled  time.Time // when tokens was last brought up to date
}

// client is what the throttle remembers of one address.
type client struct {
	fails int       // wrong tokens since the address was last forgotten
	last  time.Time // the last wrong token
	until time.Time // no attempt before this
}

func newThrottle(now func() time.Time) *throttle {
	return &throttle{now: now, clients: make(map[string]*client), tokens: globalBurst, filled: now()}
}

// clientKey is the address a request is throttled under: the IP of
// RemoteAddr, with an IPv6 address cut to its /64 (one host usually holds
// the whole /64). Forwarding headers are not trusted: behind a reverse
// proxy every client shares the proxy's address.
func clientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip4 := ip.To4(); ip4 != nil {
		return ip4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// refill brings the global bucket up to date. mu is held.
func (t *throttle) refill(now time.Time) {
	if dt := now.Sub(t.filled); dt > 0 {
		t.tokens += float64(dt) / float64(globalRefill)
		if t.tokens > globalBurst {
			t.tokens = globalBurst
		}
	}
	t.filled = now
}

// wait returns how long the address key must wait before its token is
// checked; 0 means check it now.
func (t *throttle) wait(key string) time.Duration {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.clients[key]; c != nil {
		if now.Sub(c.last) >= throttleForget && !now.Before(c.until) {
			delete(t.clients, key)
		} else if now.Before(c.until) {
			return c.until.Sub(now)
		}
	}
	t.refill(now)
	if t.tokens < 1 {
		return time.Duration((1 - t.tokens) * float64(globalRefill))
	}
	return 0
}

// fail records a wrong token from key.
func (t *throttle) fail(key string) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill(now)
	if t.tokens >= 1 {
		t.tokens--
	} else {
		t.tokens = 0
	}
	c := t.clients[key]
	if c == nil {
		if len(t.clients) >= throttleMaxClients {
			t.evict(now)
		}
		c = &client{}
		t.clients[key] = c
	} else if now.Sub(c.last) >= throttleForget && !now.Before(c.until) {
		*c = client{}
	}
	c.fails++
	c.last = now
	if over := c.fails - throttleBudget; over > 0 {
		d := throttleMaxWait
		if over <= 20 {
			d = min(throttleBase<<(over-1), throttleMaxWait)
		}
		c.until = now.Add(d)
	}
}

// succeed forgets key's wrong tokens.
func (t *throttle) succeed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.clients, key)
}

// evict makes room in a full table: it drops every forgotten address and,
// if none was, the one whose last wrong token is the oldest. mu is held.
func (t *throttle) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	dropped := false
	for k, c := range t.clients {
		if now.Sub(c.last) >= throttleForget && !now.Before(c.until) {
			delete(t.clients, k)
			dropped = true
			continue
		}
		if oldest == "" || c.last.Before(oldestAt) {
			oldest, oldestAt = k, c.last
		}
	}
	if !dropped && oldest != "" {
		delete(t.clients, oldest)
	}
}
