package kinds_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/dnstest"
	"github.com/runlog/runlog/internal/kinds"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ip      string
		rule    string
		private bool
	}{
		{"93.184.216.34", "", false},
		{"2606:2800:220:1::", "", false},
		{"192.0.2.2", "", false},
		{"127.0.0.1", kinds.RuleLoopback, true},
		{"127.9.9.9", kinds.RuleLoopback, true},
		{"::1", kinds.RuleLoopback, true},
		{"::ffff:127.0.0.1", kinds.RuleLoopback, true},
		{"0.0.0.0", kinds.RuleUnspecified, true},
		{"0.1.2.3", kinds.RuleUnspecified, true},
		{"::", kinds.RuleUnspecified, true},
		{"10.1.2.3", kinds.RulePrivate, true},
		{"172.16.0.1", kinds.RulePrivate, true},
		{"172.31.255.255", kinds.RulePrivate, true},
		{"172.32.0.1", "", false},
		{"192.168.1.1", kinds.RulePrivate, true},
		{"100.64.0.1", kinds.RulePrivate, true},
		{"::ffff:10.0.0.1", kinds.RulePrivate, true},
		{"fd12:3456::1", kinds.RuleUniqueLocal, true},
		{"fc00::1", kinds.RuleUniqueLocal, true},
		{"169.254.169.254", kinds.RuleMetadata, false},
		{"::ffff:169.254.169.254", kinds.RuleMetadata, false},
		{"64:ff9b::a9fe:a9fe", kinds.RuleMetadata, false}, // NAT64 of 169.254.169.254
		{"64:ff9b::7f00:1", kinds.RuleLoopback, true},
		{"fd00:ec2::254", kinds.RuleMetadata, false},
		{"100.100.100.200", kinds.RuleMetadata, false},
		{"169.254.1.1", kinds.RuleLinkLocal, false},
		{"fe80::1", kinds.RuleLinkLocal, false},
		{"fe80::1%eth0", kinds.RuleLinkLocal, false},
		{"224.0.0.1", kinds.RuleMulticast, false},
		{"255.255.255.255", kinds.RuleMulticast, false},
		{"ff02::1", kinds.RuleMulticast, false},
	} {
		rule, private := kinds.Classify(netip.MustParseAddr(tc.ip))
		if rule != tc.rule || private != tc.private {
			t.Errorf("Classify(%s) = %q, %v; want %q, %v", tc.ip, rule, private, tc.rule, tc.private)
		}
	}
}

func TestGuardCheck(t *testing.T) {
	t.Parallel()
	lo := netip.MustParseAddr("127.0.0.1")
	meta := netip.MustParseAddr("169.254.169.254")
	g := kinds.Guard{}
	if err := g.Check("127.0.0.1", "80", lo); err != nil {
		t.Errorf("the zero guard refuses loopback: %v", err)
	}
	err := g.Check("169.254.169.254", "80", meta)
	if !errors.Is(err, kinds.ErrRefused) || !strings.Contains(err.Error(), kinds.GuardPhrase) || !strings.Contains(err.Error(), kinds.RuleMetadata) {
		t.Errorf("the zero guard on the metadata address: %v", err)
	}
	g = kinds.Guard{BlockPrivate: true, AllowHosts: []string{"*.corp.example", "named.example", "10.0.0.5", "pinned.example:8443"}}
	for _, tc := range []struct {
		host, port, ip string
		refused        bool
	}{
		{"127.0.0.1", "80", "127.0.0.1", true},
		{"x.corp.example", "80", "10.0.0.1", true}, // a wildcard waives nothing
		{"named.example", "80", "10.0.0.1", false},
		{"NAMED.example.", "80", "127.0.0.1", false},
		{"10.0.0.5", "80", "10.0.0.5", false},
		{"10.0.0.6", "80", "10.0.0.6", true},
		{"pinned.example", "8443", "192.168.0.1", false},
		{"pinned.example", "80", "192.168.0.1", true},
		{"public.example", "443", "93.184.216.34", false},
	} {
		err := g.Check(tc.host, tc.port, netip.MustParseAddr(tc.ip))
		if (err != nil) != tc.refused {
			t.Errorf("Check(%s:%s → %s) = %v; want refused %v", tc.host, tc.port, tc.ip, err, tc.refused)
		}
	}
	for target, refused := range map[string]bool{
		"http://127.0.0.1:80": true, "http://[::1]:80": true, "http://localhost:9": true, "http://a.localhost:9": true,
		"http://10.1.2.3:80": true, "http://169.254.169.254:80": true, "http://example.com:80": false,
		"http://10.0.0.5:80": false,
	} {
		if err := g.CheckTarget(target); (err != nil) != refused {
			t.Errorf("CheckTarget(%s) = %v; want refused %v", target, err, refused)
		}
	}
}

// TestGuardAtDelivery delivers, through a guard that applies the private
// rules (a server listening beyond loopback), to loopback, private and
// metadata addresses, to a name that a DNS server resolves to 127.0.0.1
// and to a target that redirects to that name; each is refused with the
// rule named and nothing is contacted. With the private rules off
// (--allow-private-targets) the loopback ones are delivered; the metadata
// address stays refused.
func TestGuardAtDelivery(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	var hits6 atomic.Int64
	ln6, err6 := net.Listen("tcp", "[::1]:0")
	url6 := "http://[::1]:9/"
	if err6 == nil {
		srv6 := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits6.Add(1) })}
		go func() { _ = srv6.Serve(ln6) }()
		defer srv6.Close()
		url6 = "http://" + ln6.Addr().String() + "/"
	}
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://rebind.test:"+port+"/", http.StatusTemporaryRedirect)
	}))
	defer redirector.Close()
	_, rport, _ := net.SplitHostPort(redirector.Listener.Addr().String())
	dns := dnstest.Start(t, map[string][]netip.Addr{
		"rebind.test":   {netip.MustParseAddr("127.0.0.1")},
		"redirect.test": {netip.MustParseAddr("127.0.0.1")},
	})

	type want struct {
		url       string
		rule      string // "" = delivered
		permitted bool   // delivered once the private rules are off
	}
	cases := map[string]want{
		"127.0.0.1":             {recv.URL + "/", kinds.RuleLoopback, true},
		"[::1]":                 {url6, kinds.RuleLoopback, err6 == nil},
		"10.x":                  {"http://10.255.0.1:81/", kinds.RulePrivate, false},
		"169.254.169.254":       {"http://169.254.169.254/latest/meta-data/", kinds.RuleMetadata, false},
		"name → 127.0.0.1":      {"http://rebind.test:" + port + "/", kinds.RuleLoopback, true},
		"redirect to 127.0.0.1": {"http://redirect.test:" + rport + "/", kinds.RuleLoopback, false},
	}
	for _, blockPrivate := range []bool{true, false} {
		r := openRunner(t, kinds.Config{Guard: kinds.Guard{
			BlockPrivate: blockPrivate, Resolver: dns.Resolver(),
			// The operator named the redirector's host: it is reached,
			// its redirect's target is not.
			AllowHosts: []string{"redirect.test:" + rport},
		}})
		for name, tc := range cases {
			before, before6 := hits.Load(), hits6.Load()
			id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: tc.url}, runlog.Timeout(500*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			j := waitJob(t, r, id, finished)
			refusedNow := tc.rule == kinds.RuleMetadata || blockPrivate
			switch {
			case refusedNow:
				if j.State != runlog.StateFailed || j.Attempts != 1 || !strings.Contains(j.Reason, kinds.GuardPhrase) || !strings.Contains(j.Reason, `"`+tc.rule+`"`) {
					t.Errorf("private rules %v, %s: %s after %d attempts, reason %q; want failed at once, refused by the guard's %s rule", blockPrivate, name, j.State, j.Attempts, j.Reason, tc.rule)
				}
				if hits.Load() != before || hits6.Load() != before6 {
					t.Errorf("private rules %v, %s: a refused delivery reached the receiver", blockPrivate, name)
				}
			case tc.permitted:
				if j.State != runlog.StateSucceeded {
					t.Errorf("private rules off, %s: %s, reason %q; want delivered", name, j.State, j.Reason)
				}
			default:
				if strings.Contains(j.Reason, kinds.GuardPhrase) || strings.Contains(j.LastError, kinds.GuardPhrase) {
					t.Errorf("private rules off, %s: refused by the guard: %q", name, j.Reason)
				}
			}
		}
		if !blockPrivate {
			// The redirect is the target's answer (never followed): the
			// job fails, for the redirect, not for the guard.
			id, _ := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: cases["redirect to 127.0.0.1"].url})
			if j := waitJob(t, r, id, finished); !strings.Contains(j.Reason, "redirects are not followed") {
				t.Errorf("private rules off, the redirect: reason %q", j.Reason)
			}
		}
	}
}

// TestGuardWaiverIsByName: an allow-list entry naming an address waives
// the guard for URLs with that literal host, not for a name that resolves
// to it (the operator named 127.0.0.1, not flip.test).
func TestGuardWaiverIsByName(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	dns := dnstest.Start(t, map[string][]netip.Addr{"flip.test": {netip.MustParseAddr("127.0.0.1")}})
	r := openRunner(t, kinds.Config{Guard: kinds.Guard{BlockPrivate: true, Resolver: dns.Resolver(), AllowHosts: []string{"127.0.0.1"}}})
	u := "http://flip.test:" + port + "/"
	id, _ := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: u})
	if j := waitJob(t, r, id, finished); j.State != runlog.StateFailed || !strings.Contains(j.Reason, kinds.GuardPhrase) {
		t.Fatalf("flip.test → 127.0.0.1, the name not allowed: %s, %q", j.State, j.Reason)
	}
	if hits.Load() != 0 {
		t.Fatal("the receiver was reached")
	}
}
