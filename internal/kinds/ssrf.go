package kinds

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// GuardPhrase is in the text of every refusal of the SSRF guard, at enqueue
// and at delivery, so that operators and clients can search for it.
const GuardPhrase = "refused by the SSRF guard"

// The rules of the SSRF guard, as they are named in its refusals.
const (
	RuleLinkLocal   = "link-local"
	RuleMetadata    = "cloud metadata"
	RuleMulticast   = "multicast or broadcast"
	RuleLoopback    = "loopback"
	RulePrivate     = "private"
	RuleUniqueLocal = "unique-local"
	RuleUnspecified = "unspecified (this host)"
)

// ErrRefused is wrapped by every GuardError; test with errors.Is.
var ErrRefused = errors.New("kinds: " + GuardPhrase)

// Guard is the SSRF guard of the http kind: it checks the address each
// delivery actually connects to, after DNS (in the dialer's Control hook,
// so a name that resolves to another address at delivery than at enqueue,
// or a connection a redirect or a proxy setting would open, is checked
// too).
//
// Refused always (unless waived): link-local (169.254.0.0/16, fe80::/10),
// cloud metadata (169.254.169.254, 169.254.170.2, 100.100.100.200,
// 192.0.0.192, fd00:ec2::254) and multicast or broadcast addresses.
// Refused when BlockPrivate is set: loopback (127.0.0.0/8, ::1), the
// unspecified addresses (0.0.0.0/8, ::, which reach this host), private
// (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10, fec0::/10)
// and unique-local (fc00::/7). An IPv4 address inside IPv6 (::ffff:a.b.c.d,
// 64:ff9b::a.b.c.d) is judged as the IPv4 address.
//
// An entry of AllowHosts that names the URL's host exactly (not a
// "*.domain" wildcard; with its port, if the entry has one) waives every
// rule for that host: the operator named it. The zero Guard applies the
// rules that hold always.
type Guard struct {
	// BlockPrivate applies the loopback, unspecified, private and
	// unique-local rules: the server listens beyond loopback and the
	// operator did not pass --allow-private-targets.
	BlockPrivate bool
	// AllowHosts is the operator's allow-list (--allow-host); its exact
	// entries waive the rules for the hosts they name.
	AllowHosts []string
	// Resolver resolves the names of URLs (nil: net.DefaultResolver). Tests
	// point it at a DNS server of their own.
	Resolver *net.Resolver
}

// GuardError is a refusal of the SSRF guard.
type GuardError struct {
	// Host is the URL's host (a name or an IP).
	Host string
	// Addr is the refused address (the URL's literal IP, or what its name
	// resolved to).
	Addr netip.Addr
	// Rule names the rule that refused it, one of the Rule constants.
	Rule string
	// Private reports whether the rule is one of those BlockPrivate
	// applies (and --allow-private-targets waives).
	Private bool
}

// Error says what was refused, by which rule, and how the operator allows
// it.
func (e *GuardError) Error() string {
	what := e.Addr.String()
	if e.Host != what {
		what = fmt.Sprintf("%s (%s)", e.Host, what)
	}
	how := fmt.Sprintf("refused by default; the operator may allow this host with --allow-host %s (which also limits http jobs to the hosts listed)", e.Host)
	if e.Private {
		how = fmt.Sprintf("refused because the server listens beyond loopback; the operator may allow it with --allow-private-targets, or --allow-host %s (which also limits http jobs to the hosts listed)", e.Host)
	}
	return fmt.Sprintf("%s %s: a %s address (rule %q), %s", what, GuardPhrase, e.Rule, e.Rule, how)
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *GuardError) Is(target error) bool { return target == ErrRefused }

var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, DigitalOcean...
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	}
	cgnat  = netip.MustParsePrefix("100.64.0.0/10")
	thisV4 = netip.MustParsePrefix("0.0.0.0/8")
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	siteV6 = netip.MustParsePrefix("fec0::/10")
	bcast  = netip.MustParseAddr("255.255.255.255")
)

// Classify returns the rule of the guard that covers ip, "" for a public
// unicast address, and whether the rule is one of the private ones (which
// apply only with BlockPrivate).
func Classify(ip netip.Addr) (rule string, private bool) {
	ip = ip.WithZone("")
	if ip.Is6() && !ip.Is4In6() && nat64.Contains(ip) {
		b := ip.As16()
		if r, p := Classify(netip.AddrFrom4([4]byte(b[12:]))); r != "" {
			return r, p
		}
	}
	ip = ip.Unmap()
	for _, m := range metadataAddrs {
		if ip == m {
			return RuleMetadata, false
		}
	}
	switch {
	case ip.IsLinkLocalUnicast():
		return RuleLinkLocal, false
	case ip.IsMulticast(), ip == bcast:
		return RuleMulticast, false
	case ip.IsLoopback():
		return RuleLoopback, true
	case ip.IsUnspecified(), ip.Is4() && thisV4.Contains(ip):
		return RuleUnspecified, true
	case ip.Is6() && ip.IsPrivate():
		return RuleUniqueLocal, true
	case ip.IsPrivate(), ip.Is4() && cgnat.Contains(ip), ip.Is6() && siteV6.Contains(ip):
		return RulePrivate, true
	}
	return "", false
}

// Check returns a *GuardError when a delivery to a URL with this host and
// port must not connect to ip, else nil.
func (g *Guard) Check(host, port string, ip netip.Addr) error {
	rule, private := Classify(ip)
	if rule == "" || private && !g.BlockPrivate {
		return nil
	}
	if g.named(host, port) {
		return nil
	}
	return &GuardError{Host: host, Addr: ip.Unmap().WithZone(""), Rule: rule, Private: private}
}

// named reports whether an exact entry of the allow-list names host (and
// port, when the entry has one).
func (g *Guard) named(host, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), "."))
	for _, entry := range g.AllowHosts {
		entry = strings.ToLower(strings.TrimSpace(entry))
		if h, p, err := net.SplitHostPort(entry); err == nil {
			if p != port {
				continue
			}
			entry = h
		}
		entry = strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(entry, "["), "]"), ".")
		if entry == host {
			return true
		}
		if a, err := netip.ParseAddr(entry); err == nil {
			if b, err := netip.ParseAddr(host); err == nil && a.Unmap() == b.Unmap() {
				return true
			}
		}
	}
	return false
}

// CheckTarget checks, before a job is enqueued, the host of an http job's
// target (scheme://host:port, as HTTPRequest.Check returns it): an IP
// literal the guard refuses, or "localhost" (and its subdomains, which
// resolve to loopback by RFC 6761) where loopback is refused, is refused
// now rather than at delivery. Names are checked at delivery, after DNS.
func (g *Guard) CheckTarget(target string) error {
	_, hostport, ok := strings.Cut(target, "://")
	if !ok {
		return nil
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return g.Check(host, port, ip)
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return g.Check(host, port, netip.IPv6Loopback())
	}
	return nil
}

// CheckURL is CheckTarget for a URL, e.g. the Location of a redirect.
func (g *Guard) CheckURL(u *url.URL) error {
	return g.CheckTarget(u.Scheme + "://" + hostPort(u))
}

// checkLocation checks the URL of a redirect as a delivery to it would be
// checked: its literal address, or every address its name resolves to now.
// A name that does not resolve is not refused (nothing would be dialled).
func (g *Guard) checkLocation(ctx context.Context, u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" || u.Hostname() == "" {
		return nil
	}
	if err := g.CheckURL(u); err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(hostPort(u))
	if err != nil {
		return nil
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if err := g.Check(host, port, ip); err != nil {
			return err
		}
	}
	return nil
}

// dialContext dials addr (host:port, as the transport passes it, before
// DNS) and checks every address the dialer tries in its Control hook.
func (g *Guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Resolver:  g.Resolver,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("the SSRF guard cannot read the address %q it is asked to dial: %w", address, err)
			}
			return g.Check(host, port, ap.Addr())
		},
	}
	return d.DialContext(ctx, network, addr)
}
