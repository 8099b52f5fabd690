package server

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

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/dnstest"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// TestSSRFGuardBeyondLoopback runs a server on 0.0.0.0 (with a token): a
// job whose URL is a loopback, private or metadata literal (or localhost)
// is refused at enqueue with 400, a name that resolves to 127.0.0.1 is
// refused at delivery and the job fails naming the rule; with
// AllowPrivateTargets the loopback ones are delivered and the metadata
// address is still refused.
func TestSSRFGuardBeyondLoopback(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer recv.Close()
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	dns := dnstest.Start(t, map[string][]netip.Addr{"rebind.test": {netip.MustParseAddr("127.0.0.1")}})
	literals := map[string]string{
		"http://127.0.0.1:" + port + "/": kinds.RuleLoopback,
		"http://localhost:" + port + "/": kinds.RuleLoopback,
		"http://[::1]:" + port + "/":     kinds.RuleLoopback,
		"http://10.20.30.40/":            kinds.RulePrivate,
		"http://[fd00::1]/":              kinds.RuleUniqueLocal,
		"http://169.254.169.254/":        kinds.RuleMetadata,
	}
	for _, allowPrivate := range []bool{false, true} {
		srv, err := Start(Config{Dir: t.TempDir(), Addr: "0.0.0.0:0", Token: "tok", AllowPrivateTargets: allowPrivate, Resolver: dns.Resolver(),
			Runner: runlog.Config{Retry: runlog.RetryPolicy{Attempts: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		_, sport, _ := net.SplitHostPort(srv.Addr())
		c := &Client{BaseURL: "http://127.0.0.1:" + sport, Token: "tok"}
		ctx := context.Background()
		for u, rule := range literals {
			_, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: u})
			refused := !allowPrivate || rule == kinds.RuleMetadata
			var apiErr *APIError
			if refused && (!errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, kinds.GuardPhrase) || !strings.Contains(apiErr.Message, rule)) {
				t.Errorf("allow private %v: enqueue %s: %v; want 400 refused by the SSRF guard, rule %s", allowPrivate, u, err, rule)
			}
			if !refused && err != nil {
				t.Errorf("allow private %v: enqueue %s: %v", allowPrivate, u, err)
			}
		}
		before := hits.Load()
		created, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: "http://rebind.test:" + port + "/"})
		if err != nil {
			t.Fatal(err)
		}
		j := testwait.Until(t, "the job to finish", func() (Job, bool) {
			j, err := c.Job(ctx, created.ID)
			if err != nil {
				t.Fatal(err)
			}
			return j, j.State == runlog.StateSucceeded || j.State == runlog.StateFailed
		})
		if !allowPrivate && (j.State != runlog.StateFailed || !strings.Contains(j.Reason, kinds.GuardPhrase) || !strings.Contains(j.Reason, kinds.RuleLoopback) || hits.Load() != before) {
			t.Errorf("rebind.test → 127.0.0.1 on a server beyond loopback: %s, %q, receiver hit %d times", j.State, j.Reason, hits.Load()-before)
		}
		if allowPrivate && j.State != runlog.StateSucceeded {
			t.Errorf("rebind.test → 127.0.0.1 with AllowPrivateTargets: %s, %q", j.State, j.Reason)
		}
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
