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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/runlog/runlog"
	"github.com/runlog/runlog/dashboard"
	"github.com/runlog/runlog/internal/authlimit"
	idash "github.com/runlog/runlog/internal/dashboard"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/mount"
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
	// HTTPRetry is the retry policy of http jobs that name none (a job's
	// retry object overrides its fields). Zero means DefaultHTTPRetry when
	// Runner.Retry is zero too, else Runner.Retry: an operator who set the
	// server's policy set it for every kind.
	HTTPRetry runlog.RetryPolicy
	// Runner is the engine configuration; Handlers and Observer are set by
	// Start (the built-in kinds and the metrics), MaxPayload defaults to
	// MaxBody.
	Runner runlog.Config
	// Commands are the exec kind's registered commands (name → absolute
	// path, see kinds.ParseCommand).
	Commands map[string]string
	// AllowHosts, when not empty, limits the hosts http jobs may target;
	// its exact entries also waive the SSRF guard for the hosts they name.
	AllowHosts []string
	// AllowPrivateTargets turns off the SSRF guard's loopback, private and
	// unique-local rules, which apply when Addr is not a loopback address
	// (link-local and cloud-metadata addresses stay refused). See
	// kinds.Guard.
	AllowPrivateTargets bool
	// Resolver resolves the host names of http jobs' URLs at delivery (nil:
	// the system's resolver). The SSRF guard checks what it returns.
	Resolver *net.Resolver
	// SigningSecret, when set, is the default signing secret ("whsec_" and
	// base64, --signing-secret-file): deliveries to a target without
	// secrets of its own are signed with it. Per-target secrets are kept in
	// SecretsFile in Dir, or in PostgreSQL.
	SigningSecret string
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
	// MetricsTargets is how many targets keep their own target label in
	// the metrics (the busiest; the rest share target="other"). Defaults to
	// DefaultMetricsTargets.
	MetricsTargets int
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
	// closeSecrets stops reading the signing secrets again (PostgreSQL).
	closeSecrets func()

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
	secrets, closeSecrets, err := openSecrets(cfg)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			closeSecrets()
		}
	}()
	metrics := NewMetrics(MetricsOptions{Targets: cfg.MetricsTargets})
	recorder := idash.NewRecorder()
	rc := cfg.Runner
	guard := kinds.Guard{BlockPrivate: !IsLoopback(cfg.Addr) && !cfg.AllowPrivateTargets, AllowHosts: cfg.AllowHosts, Resolver: cfg.Resolver}
	rc.Handlers = kinds.Handlers(kinds.Config{
		Client:     kinds.NewClient(max(rc.Concurrency, 64), &guard),
		Guard:      guard,
		Signer:     secrets,
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
	var runner *runlog.Runner
	var dataDir string
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
		if dataDir, err = filepath.Abs(cfg.Dir); err != nil {
			dataDir = cfg.Dir
		}
	}
	metrics.Watch(runner)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = runner.Close(context.Background())
		return nil, fmt.Errorf("server: listen on %s: %w", cfg.Addr, err)
	}
	retry, httpRetry := rc.Retry, cfg.HTTPRetry
	if retry == (runlog.RetryPolicy{}) {
		retry = DefaultRetry
		if httpRetry == (runlog.RetryPolicy{}) {
			httpRetry = DefaultHTTPRetry
		}
	} else if httpRetry == (runlog.RetryPolicy{}) {
		httpRetry = retry // the operator chose one policy for every kind
	}
	limiter := authlimit.New(nil) // wrong tokens count alike at the API and the dashboard
	var dash http.Handler
	if !cfg.NoDashboard {
		// The public dashboard, with the server's limiter (shared with the
		// API) and its recorder (a lossless Observer, not a subscription).
		opts := dashboard.Options{Token: cfg.Token, ReadOnly: cfg.DashboardReadOnly, Logger: cfg.Logger}
		dash = dashboard.New(runner, mount.Dashboard(opts, limiter, recorder).(dashboard.Options))
	}
	api := NewAPI(runner, APIConfig{
		Token:     cfg.Token,
		MaxBody:   cfg.MaxBody,
		Policy:    Policy{AllowHosts: cfg.AllowHosts, Guard: &guard, Commands: cfg.Commands, Retry: retry, HTTPRetry: httpRetry},
		Metrics:   metrics.Handler(),
		Dashboard: dash,
		Logger:    cfg.Logger,
		Limiter:   limiter,
		Secrets:   secrets,
		DataDir:   dataDir,
	})
	g, err := newGuard(api, cfg.Addr, cfg.Hostnames)
	if err != nil {
		_ = ln.Close()
		_ = runner.Close(context.Background())
		return nil, err
	}
	handler := metrics.instrument(g)
	stopDisk := func() {}
	if cfg.Postgres == "" {
		seg := rc.SegmentSize
		if seg <= 0 {
			seg = runlog.DefaultSegmentSize
		}
		// Warn with a few segments' worth of room left.
		stopDisk = metrics.WatchDisk(cfg.Dir, 4*seg, cfg.Logger)
		metrics.WatchDir(cfg.Dir)
	}
	s := &Server{
		stopDisk:     stopDisk,
		closeSecrets: closeSecrets,
		runner:       runner,
		api:          api,
		ln:           ln,
		log:          cfg.Logger,
		http:         newHTTPServer(handler, cfg),
		handler:      handler,
		serveErr:     make(chan error, 1),
	}
	started = true
	go func() { s.serveErr <- s.http.Serve(strictListener{ln}) }()
	data := cfg.Dir
	if cfg.Postgres != "" {
		data = "PostgreSQL" // Dir is not used
	}
	cfg.Logger.Info("runlog serving", "addr", s.Addr(), "data", data, "auth", cfg.Token != "",
		"signing_default", secrets.HasDefault(), "exec_commands", len(cfg.Commands), "allow_hosts", len(cfg.AllowHosts), "ssrf_private_rule", guard.BlockPrivate)
	return s, nil
}

// openSecrets loads the signing secrets of cfg before the runner opens (a
// job delivered at once after the open is signed already): from
// SecretsFile in Dir, or from PostgreSQL (migrating its schema first). The
// function it returns stops what it started.
func openSecrets(cfg Config) (*Secrets, func(), error) {
	ctx := context.Background()
	if cfg.Postgres == "" {
		if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("server: create the data directory %s: %w", cfg.Dir, err)
		}
		s, err := newSecrets(ctx, &fileSecrets{path: filepath.Join(cfg.Dir, SecretsFile)}, cfg.SigningSecret)
		if err != nil {
			return nil, nil, fmt.Errorf("server: signing secrets: %w", err)
		}
		return s, func() {}, nil
	}
	if _, err := postgres.Migrate(ctx, cfg.Postgres); err != nil {
		return nil, nil, fmt.Errorf("server: migrate the PostgreSQL schema: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.Postgres)
	if err != nil {
		return nil, nil, fmt.Errorf("server: PostgreSQL connection string: %w", err)
	}
	pcfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, fmt.Errorf("server: connect to PostgreSQL for the signing secrets: %w", err)
	}
	b := &pgSecrets{pool: pool}
	s, err := newSecrets(ctx, b, cfg.SigningSecret)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("server: signing secrets: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.watch(wctx, s, cfg.Logger)
	}()
	return s, func() { cancel(); <-done; pool.Close() }, nil
}

// DefaultRetry is runlog's default retry policy, used to fill the fields a
// job's retry object leaves out when the server was given none.
var DefaultRetry = runlog.RetryPolicy{Attempts: 10, Base: 500 * time.Millisecond, Cap: 30 * time.Second}

// DefaultHTTPRetry is the retry policy of http jobs when neither the job
// nor the server chose one: a webhook sender's schedule over about a day.
// 15 attempts, the waits doubling from 7 s (each jittered into [d/2, d]):
// 7 s, 14 s, 28 s, 56 s, 1m52s, 3m44s, 7m28s, 15 m, 30 m, 1 h, 2 h, 4 h,
// 8 h and 16 h at most, 31.9 h in all at most, 23.9 h on average and 15.9
// h at least. The cap, 24 h, is not reached by the backoff: it is there as
// the bound of a target's Retry-After (kinds.MaxRetryAfter), which the
// engine caps at the policy's cap, so that a receiver asking for an hour is
// called again after an hour, not after the backoff's longest wait.
var DefaultHTTPRetry = runlog.RetryPolicy{Attempts: 15, Base: 7 * time.Second, Cap: kinds.MaxRetryAfter}

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
		s.closeSecrets()
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

// JobsEnqueued passes the count to every observer that is a JobObserver.
func (o observers) JobsEnqueued(kind string, n int) {
	for _, ob := range o {
		if jo, ok := ob.(runlog.JobObserver); ok {
			jo.JobsEnqueued(kind, n)
		}
	}
}

// JobFinished passes e to every observer that is a JobObserver.
func (o observers) JobFinished(e runlog.JobEvent) {
	for _, ob := range o {
		if jo, ok := ob.(runlog.JobObserver); ok {
			jo.JobFinished(e)
		}
	}
}

// BreakerChanged passes e to every observer that is a JobObserver.
func (o observers) BreakerChanged(e runlog.BreakerEvent) {
	for _, ob := range o {
		if jo, ok := ob.(runlog.JobObserver); ok {
			jo.BreakerChanged(e)
		}
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
