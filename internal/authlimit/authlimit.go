// Package authlimit slows down guessing of the server's token. The
// dashboard's login form and bearer header and the API's bearer header
// share one Limiter, so that no door is faster than another.
//
// The rules: each client address (an IPv4 address, or the /64 of an IPv6
// one, taken from the connection; forwarding headers are not trusted) may
// send Budget wrong tokens; after that each further wrong token makes it
// wait, 1 s, then 2 s, 4 s… up to MaxWait, and until then its token is not
// even checked (the answer is 429 with Retry-After). An address starts
// afresh Forget after its last wrong token. Over all addresses together,
// GlobalBurst wrong tokens may come at once and then one per GlobalRefill;
// beyond that every address must wait, except the addresses that sent the
// right token within GoodFor, so that a stranger cannot lock out the
// clients already at work. A right token does not forgive an address its
// wrong ones (a client sharing the address of an attacker would otherwise
// reset the attacker's count). Memory is bounded: at most MaxClients
// addresses of each kind are remembered.
package authlimit

import (
	"net"
	"strconv"
	"sync"
	"time"
)

// Limits of a Limiter.
const (
	// Budget is the number of wrong tokens an address may send before it
	// has to wait.
	Budget = 5
	// BaseWait is the first wait after the budget; each further wrong
	// token doubles it, up to MaxWait.
	BaseWait = time.Second
	// MaxWait is the longest wait of one address.
	MaxWait = 5 * time.Minute
	// Forget is how long after its last wrong token an address starts
	// afresh.
	Forget = 30 * time.Minute
	// GlobalBurst wrong tokens from all addresses together are allowed at
	// once, then one per GlobalRefill.
	GlobalBurst  = 60
	GlobalRefill = 2 * time.Second
	// GoodFor is how long an address that sent the right token is exempt
	// from the global cap (never from its own limit).
	GoodFor = 24 * time.Hour
	// MaxClients bounds each table (wrong and right addresses).
	MaxClients = 10000
)

// Limiter counts wrong tokens; see the package comment. The zero value is
// not usable: call New. A nil *Limiter limits nothing. It is safe for
// concurrent use.
type Limiter struct {
	now func() time.Time

	mu     sync.Mutex
	bad    map[string]*client
	good   map[string]time.Time // the last right token of an address
	tokens float64              // the global bucket
	filled time.Time            // when tokens was last brought up to date
}

// client is what the limiter remembers of one address.
type client struct {
	fails int       // wrong tokens since the address was last forgotten
	last  time.Time // the last wrong token
	until time.Time // no check before this
}

// New returns a limiter on the clock now (time.Now when nil).
func New(now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{now: now, bad: make(map[string]*client), good: make(map[string]time.Time), tokens: GlobalBurst, filled: now()}
}

// ClientKey is the address a request from remoteAddr (http.Request's
// RemoteAddr) is counted under: its IP, with an IPv6 address cut to its
// /64 (one host usually holds the whole /64).
func ClientKey(remoteAddr string) string {
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

// RetryAfter formats d for a Retry-After header: whole seconds, at least 1.
func RetryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(s, 1), 10)
}

// Check compares a token from remoteAddr with ok (which should compare in
// constant time) unless the address must wait. It returns whether the
// token is right and, when it was not checked, how long to wait (answer
// 429 with Retry-After then, 401 when wait is 0 and ok is false).
func (l *Limiter) Check(remoteAddr string, ok func() bool) (right bool, wait time.Duration) {
	if l == nil {
		return ok(), 0
	}
	key := ClientKey(remoteAddr)
	if d := l.Wait(key); d > 0 {
		return false, d
	}
	if ok() {
		l.Succeed(key)
		return true, 0
	}
	l.Fail(key)
	return false, 0
}

// forgotten reports whether c may be dropped at now.
func (c *client) forgotten(now time.Time) bool {
	return now.Sub(c.last) >= Forget && !now.Before(c.until)
}

// refill brings the global bucket up to date. mu is held.
func (l *Limiter) refill(now time.Time) {
	if dt := now.Sub(l.filled); dt > 0 {
		l.tokens = min(l.tokens+float64(dt)/float64(GlobalRefill), GlobalBurst)
	}
	l.filled = now
}

// Wait returns how long the address key must wait before its token is
// checked; 0 means check it now.
func (l *Limiter) Wait(key string) time.Duration {
	if l == nil {
		return 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.bad[key]; c != nil {
		if c.forgotten(now) {
			delete(l.bad, key)
		} else if now.Before(c.until) {
			return c.until.Sub(now)
		}
	}
	l.refill(now)
	if l.tokens >= 1 {
		return 0
	}
	if at, ok := l.good[key]; ok && now.Sub(at) < GoodFor {
		return 0
	}
	return time.Duration((1 - l.tokens) * float64(GlobalRefill))
}

// Fail records a wrong token from key.
func (l *Limiter) Fail(key string) {
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refill(now)
	l.tokens = max(l.tokens-1, 0)
	c := l.bad[key]
	if c == nil {
		if len(l.bad) >= MaxClients {
			l.evictBad(now)
		}
		c = &client{}
		l.bad[key] = c
	} else if c.forgotten(now) {
		*c = client{}
	}
	c.fails++
	c.last = now
	if over := c.fails - Budget; over > 0 {
		d := MaxWait
		if over <= 20 {
			d = min(BaseWait<<(over-1), MaxWait)
		}
		c.until = now.Add(d)
	}
}

// Succeed records the right token from key: the address is exempt from
// the global cap for GoodFor. Its wrong tokens stay counted.
func (l *Limiter) Succeed(key string) {
	if l == nil {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.good[key]; ok && now.Sub(at) < time.Minute && !now.Before(at) {
		return // fresh enough: spare the write on the API's hot path
	}
	if _, ok := l.good[key]; !ok && len(l.good) >= MaxClients {
		l.evictGood(now)
	}
	l.good[key] = now
}

// evictBad makes room in a full table of wrong addresses: it drops every
// forgotten one and, if none was, the one whose last wrong token is the
// oldest. mu is held. It runs at most once per wrong token that the
// global bucket let through.
func (l *Limiter) evictBad(now time.Time) {
	var oldest string
	var oldestAt time.Time
	dropped := false
	for k, c := range l.bad {
		if c.forgotten(now) {
			delete(l.bad, k)
			dropped = true
		} else if oldest == "" || c.last.Before(oldestAt) {
			oldest, oldestAt = k, c.last
		}
	}
	if !dropped && oldest != "" {
		delete(l.bad, oldest)
	}
}

// evictGood makes room in a full table of right addresses: it drops those
// older than GoodFor and, if none was, the oldest. mu is held.
func (l *Limiter) evictGood(now time.Time) {
	var oldest string
	var oldestAt time.Time
	dropped := false
	for k, at := range l.good {
		if now.Sub(at) >= GoodFor {
			delete(l.good, k)
			dropped = true
		} else if oldest == "" || at.Before(oldestAt) {
			oldest, oldestAt = k, at
		}
	}
	if !dropped && oldest != "" {
		delete(l.good, oldest)
	}
}
