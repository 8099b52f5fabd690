// Package server is runlog serve: the JSON HTTP API over a runlog.Runner
// (API), its Prometheus metrics (Metrics), and the process that opens the
// journal, listens, serves the API and the web dashboard (package
// dashboard, at /) and shuts down gracefully (Start, Server.Shutdown).
//
// Security: the server listens on loopback by default and refuses any other
// address without a token; with a token every API path but /healthz needs
// it as a bearer header (the dashboard asks for it at its login page); it
// answers only to its own host names (Config.Hostnames), refuses
// cross-site writes and API writes that are not JSON; request bodies and
// headers are bounded; no request value becomes a filesystem path.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/authlimit"
	"github.com/runlog/runlog/internal/dashboard"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/postgres"
)

// Defaults of Config.
const (
	DefaultAddr            = "127.0.0.1:7070"
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultReadHeaderTimeout bounds how long a client may take to send
	// its request headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// MaxHeaderBytes bounds request headers; larger ones get 431.
	MaxHeaderBytes = 64 << 10
)

// ErrInsecure is returned by Start for a non-loopback address without a
// token.
var ErrInsecure = errors.New("server: refusing to listen beyond loopback without a token")

// Config configures Start. The zero value plus Dir (or Postgres) is a valid
// configuration: loopback, no token, runlog's default policies.
type Config struct {
	// Dir is the journal directory, created if missing: the embedded
	// store's journal and snapshots, and the free-space check. Required
	// unless Postgres is set; with Postgres it is not used.
	Dir string
	// Postgres, when set, is the connection string of the PostgreSQL
	// database the runner stores its jobs in (schema migrated at start),
	// instead of the journal in Dir: many servers may share it.
	Postgres string
	// PostgresOptions tune the node on Postgres (its id, lease and
	// heartbeat); unused without Postgres.
	PostgresOptions postgres.Options
	// Addr is the listen address. Defaults to DefaultAddr. A port of 0
	// picks a free port (see Server.Addr).
	Addr string
	// Token, when set, is required on every API path but /healthz (and by
	// the dashboard's login). Required when Addr is not a loopback address.
	Token string
	// Runner is the engine configuration; Handlers and Observer are set by
	// Start (the built-in kinds and the metrics), MaxPayload defaults to
	// MaxBody.
	Runner runlog.Config
	// Commands are the exec kind's registered commands (name → absolute
	// path, see kinds.ParseCommand).
	Commands map[string]string
	// AllowHosts, when not empty, limits the hosts http jobs may target.
	AllowHosts []string
	// MaxBody limits request bodies. Defaults to DefaultMaxBody (1 MiB).
	MaxBody int64
	// Logger receives structured logs. Defaults to slog.Default().
	Logger *slog.Logger
	// NoDashboard leaves the web dashboard out; by default it is served at
	// / (see package dashboard).
	NoDashboard bool
	// DashboardReadOnly hides the dashboard's actions (cancel, retry).
	DashboardReadOnly bool
	// ReadHeaderTimeout cuts off a client that has not sent its request
	// headers in time (slowloris). Defaults to DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// Hostnames are host names (or IPs) the server answers to besides the
	// host of Addr, localhost and the loopback IPs (and, when Addr is
	// 0.0.0.0 or ::, any IP and the machine's host name). A request whose
	// Host is none of them gets 421: a web page that rebinds its own name
	// to this server's address cannot use it.
	Hostnames []string
}

// Server is a running runlog serve: an open runner and an HTTP server.
type Server struct {
	runner   *runlog.Runner
	api      *API
	http     *http.Server
	handler  http.Handler
	ln       net.Listener
	log      *slog.Logger
	serveErr chan error // receives Serve's result once
	stopDisk func()     // stops the free-space checks (a no-op on PostgreSQL)

	closeOnce sync.Once
	closeErr  error
}

// Start checks cfg, opens the journal (replaying it), listens on cfg.Addr and
// serves the API in the background until Shutdown.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" && cfg.Postgres == "" {
		return nil, errors.New("server: no data directory: set --data or RUNLOG_DATA (or --postgres to store jobs in PostgreSQL)")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Token == "" && !IsLoopback(cfg.Addr) {
		return nil, fmt.Errorf("%w: %s is reachable from other hosts; set --token (or RUNLOG_TOKEN), or listen on 127.0.0.1", ErrInsecure, cfg.Addr)
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	// Checked before the journal opens: a bad name must not leave a lock.
	if _, err := newHostSet(cfg.Addr, cfg.Hostnames); err != nil {
		return nil, err
	}
	metrics := NewMetrics()
	recorder := dashboard.NewRecorder()
	rc := cfg.Runner
	rc.Handlers = kinds.Handlers(kinds.Config{
		Client:     kinds.NewClient(max(rc.Concurrency, 64)),
		AllowHosts: cfg.AllowHosts,
		Commands:   cfg.Commands,
	})
	rc.Observer = observers{metrics, recorder}
	if rc.Logger == nil {
		rc.Logger = cfg.Logger
	}
	if rc.MaxPayload <= 0 {
		rc.MaxPayload = int(cfg.MaxBody)
	}
	var (
		runner *runlog.Runner
		err    error
	)
	if cfg.Postgres != "" {
		runner, err = postgres.OpenWith(context.Background(), cfg.Postgres, rc, cfg.PostgresOptions)
		if err != nil {
			return nil, fmt.Errorf("server: open PostgreSQL store: %w", err)
		}
	} else {
		runner, err = runlog.Open(cfg.Dir, rc)
		if err != nil {
			return nil, fmt.Errorf("server: open journal %s: %w", cfg.Dir, err)
		}
	}
	metrics.Watch(runner)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = runner.Close(context.Background())
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Addr, err)
	}
	retry := rc.Retry
	if retry == (runlog.RetryPolicy{}) {
		retry = DefaultRetry
	}
	limiter := authlimit.New(nil) // wrong tokens count alike at the API and the dashboard
	var dash http.Handler
	if !cfg.NoDashboard {
		dash = dashboard.New(runner, dashboard.Options{
			Token: cfg.Token, ReadOnly: cfg.DashboardReadOnly, Recorder: recorder, Logger: cfg.Logger, Limiter: limiter,
		})
	}
	api := NewAPI(runner, APIConfig{
		Token:     cfg.Token,
		MaxBody:   cfg.MaxBody,
		Policy:    Policy{AllowHosts: cfg.AllowHosts, Commands: cfg.Commands, Retry: retry},
		Metrics:   metrics.Handler(),
		Dashboard: dash,
		Logger:    cfg.Logger,
		Limiter:   limiter,
	})
	g, err := newGuard(api, cfg.Addr, cfg.Hostnames)
	if err != nil {
		_ = ln.Close()
		_ = runner.Close(context.Background())
		return nil, err
	}
	stopDisk := func() {}
	if cfg.Postgres == "" {
		seg := rc.SegmentSize
		if seg <= 0 {
			seg = runlog.DefaultSegmentSize
		}
		// Warn with a few segments' worth of room left.
		stopDisk = metrics.WatchDisk(cfg.Dir, 4*seg, cfg.Logger)
	}
	s := &Server{
		stopDisk: stopDisk,
		runner:   runner,
		api:      api,
		ln:       ln,
		log:      cfg.Logger,
		http:     newHTTPServer(g, cfg),
		handler:  g,
		serveErr: make(chan error, 1),
	}
	go func() { s.serveErr <- s.http.Serve(strictListener{ln}) }()
	data := cfg.Dir
	if cfg.Postgres != "" {
		data = "PostgreSQL" // Dir is not used
	}
	cfg.Logger.Info("runlog serving", "addr", s.Addr(), "data", data, "auth", cfg.Token != "",
		"exec_commands", len(cfg.Commands), "allow_hosts", len(cfg.AllowHosts))
	return s, nil
}

// DefaultRetry is runlog's default retry policy, used to fill the fields a
// job's retry object leaves out when the server was given none.
var DefaultRetry = runlog.RetryPolicy{Attempts: 10, Base: 500 * time.Millisecond, Cap: 30 * time.Second}

// Addr returns the address the server listens on (with the real port when
// Config.Addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the base URL of the API, e.g. "http://127.0.0.1:7070".
func (s *Server) URL() string { return "http://" + s.Addr() }

// Runner returns the server's runner.
func (s *Server) Runner() *runlog.Runner { return s.runner }

// Handler returns the server's HTTP handler: the API with auth and the
// dashboard, behind the host, cross-site and content-type checks.
func (s *Server) Handler() http.Handler { return s.handler }

// Failed returns a channel that receives the error that stopped the HTTP
// server if it stops without Shutdown (e.g. the listener broke).
func (s *Server) Failed() <-chan error { return s.serveErr }

// Shutdown stops gracefully: /healthz turns 503, the listener closes and
// requests in progress finish, then the runner stops starting attempts,
// waits for running ones until ctx ends (attempts cut short run again after
// a restart) and closes the journal. It is safe to call more than once; later
// calls return the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.api.SetAccepting(false)
		s.log.Info("runlog shutting down")
		httpErr := s.http.Shutdown(ctx)
		if httpErr != nil {
			_ = s.http.Close() // requests still running past ctx are cut
		}
		runErr := s.runner.Close(ctx)
		s.stopDisk()
		if err := s.runner.Err(); err != nil {
			// The store had failed: a stop is not clean (exit 1), and
			// says why, so the operator fixes the cause before the
			// restart.
			runErr = errors.Join(runErr, err)
		}
		s.closeErr = errors.Join(httpErr, runErr)
		if s.closeErr != nil {
			s.log.Warn("runlog stopped", "err", s.closeErr)
		} else {
			s.log.Info("runlog stopped")
		}
	})
	return s.closeErr
}

// observers fans the runner's events out to several observers.
type observers []runlog.Observer

// AttemptFinished passes e to every observer.
func (o observers) AttemptFinished(e runlog.AttemptEvent) {
	for _, ob := range o {
		ob.AttemptFinished(e)
	}
}

// JournalSynced passes e to every observer.
func (o observers) JournalSynced(e runlog.SyncEvent) {
	for _, ob := range o {
		ob.JournalSynced(e)
	}
}

// IsLoopback reports whether addr (host:port) listens only on loopback:
// "localhost" or a loopback IP. An empty host, an unspecified IP (0.0.0.0,
// ::) and any other name count as reachable from other hosts.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
