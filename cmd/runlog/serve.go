package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/postgres"
)

// serveFlags are the flags of runlog serve.
type serveFlags struct {
	data, addr, token, tokenFile       string
	postgres, nodeID                   string
	lease, heartbeat                   time.Duration
	concurrency, targetConcurrency     int
	timeout                            time.Duration
	retryAttempts                      int
	retryBase, retryCap, retryDeadline time.Duration
	breakerThreshold, breakerProbes    int
	breakerSlowStart                   int
	rateLimits                         limitFlag
	queueRateLimits                    queueLimitFlag
	rateLimitDefault                   defaultLimitFlag
	maxRetryAfter                      time.Duration
	breakerWindow, breakerCooldown     time.Duration
	disableAfter                       time.Duration
	exec, allowHosts, hostnames        listFlag
	maxBody                            byteSize
	shutdownTimeout                    time.Duration
	logFormat, logLevel                string
	dashboard, dashboardReadOnly       bool
	metricsTargets                     int
	allowPrivateTargets                bool
	signingSecretFile                  string
	cpuProfile                         string
	// retryChosen: a --retry-* flag (or its RUNLOG_ variable) was given.
	retryChosen bool
}

// retryFlags are the flags of the server's retry policy.
var retryFlags = []string{"retry-attempts", "retry-base", "retry-cap", "retry-deadline"}

// noteRetryChosen sets f.retryChosen when fs was given a retry flag, on the
// command line or in the environment.
func (f *serveFlags) noteRetryChosen(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		if slices.Contains(retryFlags, fl.Name) {
			f.retryChosen = true
		}
	})
	for _, name := range retryFlags {
		if os.Getenv(envName(name)) != "" {
			f.retryChosen = true
		}
	}
}

// register defines the flags on fs with their defaults.
func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.data, "data", "./runlog-data", "journal `directory` (created if missing)")
	fs.StringVar(&f.postgres, "postgres", "", "store jobs in this PostgreSQL database (a connection `URL`) instead of the journal in --data; servers sharing it share the work")
	fs.StringVar(&f.nodeID, "node-id", "", "with --postgres: this server's node `id` among the servers on the database, unique among live ones and stable across restarts (a pod or host name), so that a restarted node takes back at once what it left running; default host-pid-random")
	fs.DurationVar(&f.lease, "lease", 0, "with --postgres: how long a running attempt stays this node's without a renewal before other nodes run it again; at least 300ms (default 5s)")
	fs.DurationVar(&f.heartbeat, "heartbeat", 0, "with --postgres: how often the node renews its leases, from 100ms to a third of --lease (default lease/5 within 100ms-1s)")
	fs.StringVar(&f.addr, "addr", server.DefaultAddr, "listen `address`; beyond loopback a token is required")
	fs.StringVar(&f.token, "token", "", "bearer `token` required on every API call but /healthz (prefer RUNLOG_TOKEN or --token-file)")
	fs.StringVar(&f.tokenFile, "token-file", "", "read the token from this `file`")
	fs.IntVar(&f.concurrency, "concurrency", 64, "attempts running at once (the pool)")
	fs.IntVar(&f.targetConcurrency, "target-concurrency", 0, "attempts running at once per target; 0 = no limit")
	fs.DurationVar(&f.timeout, "timeout", time.Minute, "default attempt timeout")
	fs.IntVar(&f.retryAttempts, "retry-attempts", server.DefaultRetry.Attempts, "default attempts per job, the first included (any --retry-* flag sets the policy of http jobs too, which is otherwise a webhook schedule over a day: 15 attempts from 7s, cap 24h)")
	fs.DurationVar(&f.retryBase, "retry-base", server.DefaultRetry.Base, "default first backoff")
	fs.DurationVar(&f.retryCap, "retry-cap", server.DefaultRetry.Cap, "default longest backoff")
	fs.DurationVar(&f.retryDeadline, "retry-deadline", 0, "default deadline from a job's first due time; 0 = none")
	fs.IntVar(&f.breakerThreshold, "breaker-threshold", 5, "failures within the window that open a target's breaker")
	fs.DurationVar(&f.breakerWindow, "breaker-window", time.Minute, "window in which breaker failures count")
	fs.DurationVar(&f.breakerCooldown, "breaker-cooldown", 30*time.Second, "how long an open breaker stays open")
	fs.IntVar(&f.breakerProbes, "breaker-probes", 1, "attempts a half-open breaker lets through")
	fs.DurationVar(&f.disableAfter, "disable-after", runlog.DefaultDisableAfter, "disable a target that has failed this long with no success: its jobs are kept, not attempted, until `runlog target enable` (0: never; a 410 Gone disables at once either way)")
	fs.IntVar(&f.breakerSlowStart, "breaker-slow-start", 32, "after an open breaker closes, its target runs 1 attempt at once, one more per success, up to this many; 0 or 1 = no slow start")
	fs.Var(&f.rateLimits, "rate-limit", "rate limit of a target as `TARGET=RATE[/BURST]` (attempts per second, bursts of BURST, default 1), e.g. http://127.0.0.1:9000=100/10; repeatable; PUT /v1/limits overrides it at run time")
	fs.Var(&f.queueRateLimits, "queue-rate-limit", "rate limit of a queue as `NAME=RATE[/BURST]` (attempts per second, bursts of BURST, default 1), e.g. mail=100/10; repeatable; set at start, PUT /v1/limits changes it at run time")
	fs.Var(&f.rateLimitDefault, "rate-limit-default", "rate limit of every target without one of its own, as `RATE[/BURST]`; default none")
	fs.DurationVar(&f.maxRetryAfter, "max-retry-after", runlog.DefaultMaxRetryAfter, "the longest wait a target's Retry-After is honoured for (the job and every job of its target wait that long)")
	fs.Var(&f.exec, "exec", "register a command for exec jobs as `NAME=PATH` (repeatable)")
	fs.Var(&f.allowHosts, "allow-host", "allow http jobs to target this `host` (or host:port, *.domain); repeatable; none = any host")
	fs.BoolVar(&f.allowPrivateTargets, "allow-private-targets", false, "let http jobs reach loopback, private and unique-local addresses although the server listens beyond loopback (the SSRF guard refuses them by default there; link-local and cloud metadata stay refused)")
	fs.StringVar(&f.signingSecretFile, "signing-secret-file", "", "sign http deliveries (Standard Webhooks) with the secret in this `file` (whsec_ and base64), for every target without secrets of its own (PUT /v1/targets/secrets)")
	fs.Var(&f.hostnames, "hostname", "also answer to requests for this host `name` (besides the --addr host, localhost and loopback IPs; on 0.0.0.0 also any IP and the machine's name); repeatable")
	f.maxBody = server.DefaultMaxBody
	fs.Var(&f.maxBody, "max-body", "largest request body (and job payload), e.g. 1MiB")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", server.DefaultShutdownTimeout, "on SIGINT/SIGTERM, how long running attempts may finish")
	fs.BoolVar(&f.dashboard, "dashboard", true, "serve the web dashboard at /")
	fs.BoolVar(&f.dashboardReadOnly, "read-only", false, "hide and refuse the dashboard's actions (cancel, retry)")
	fs.BoolVar(&f.dashboardReadOnly, "dashboard-read-only", false, "the same as --read-only")
	fs.IntVar(&f.metricsTargets, "metrics-targets", server.DefaultMetricsTargets, "how many targets keep their own target label in /metrics (the busiest; the rest share target=\"other\")")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a CPU profile (pprof) of the whole run to this `file`, from start to shutdown (for measuring; costs a few percent of CPU)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// logger builds the slog logger the flags ask for.
func (f *serveFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: use text or json", f.logFormat)
	}
}

// readToken returns the token of --token-file (its surrounding white space,
// such as the trailing newline, trimmed) or else of --token (RUNLOG_TOKEN),
// "" when neither is set. A file or a value with nothing but white space is
// an error, not "no token": it would turn authentication off silently. So
// is a token that no bearer header can carry (white space around it, a
// control character in it).
func (f *serveFlags) readToken() (string, error) {
	// The environment's values reach the flags trimmed, so a RUNLOG_TOKEN
	// of blanks would arrive as "no token": look at the variables.
	for _, name := range []string{"token", "token-file"} {
		if v := os.Getenv(envName(name)); v != "" && strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("%s is set but only white space: set it to a real value, or unset it to run without a token on loopback", envName(name))
		}
	}
	token, from := f.token, "--token (or RUNLOG_TOKEN)"
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		token, from = strings.TrimSpace(string(b)), "--token-file "+f.tokenFile
		if token == "" {
			return "", fmt.Errorf("%s is empty (or only white space): write the token into it (e.g. openssl rand -hex 32 > %s), or drop --token-file to run without a token on loopback", from, f.tokenFile)
		}
	} else if token != "" && strings.TrimSpace(token) == "" {
		return "", fmt.Errorf("%s is only white space: set a real token (e.g. openssl rand -hex 32), or leave it unset to run without a token on loopback", from)
	} else if token != strings.TrimSpace(token) {
		// HTTP drops the white space around a header's value: such a token
		// could never match a bearer header.
		return "", fmt.Errorf("%s begins or ends with white space, which no HTTP client can send: remove it", from)
	}
	if strings.ContainsFunc(token, unicode.IsControl) {
		return "", fmt.Errorf("%s holds a control character (a line break or tab inside it?): a token must fit in one HTTP header line; use printable characters only", from)
	}
	return token, nil
}

// readSigningSecret returns the secret of --signing-secret-file (white space
// around it trimmed), "" without the flag. The errors never repeat the
// secret.
func (f *serveFlags) readSigningSecret() (string, error) {
	if f.signingSecretFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(f.signingSecretFile)
	if err != nil {
		return "", fmt.Errorf("--signing-secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("--signing-secret-file %s is empty: write a secret into it, e.g. echo whsec_$(openssl rand -base64 32) > %s", f.signingSecretFile, f.signingSecretFile)
	}
	if _, err := kinds.ParseSecret(secret); err != nil {
		return "", fmt.Errorf("--signing-secret-file %s: %w", f.signingSecretFile, err)
	}
	return secret, nil
}

// config turns the flags into a server configuration.
func (f *serveFlags) config(log *slog.Logger) (server.Config, error) {
	token, err := f.readToken()
	if err != nil {
		return server.Config{}, err
	}
	cmds := make(map[string]string, len(f.exec))
	for _, spec := range f.exec {
		name, path, err := kinds.ParseCommand(spec)
		if err != nil {
			return server.Config{}, err
		}
		if _, dup := cmds[name]; dup {
			return server.Config{}, fmt.Errorf("--exec %q: %s is registered twice", spec, name)
		}
		cmds[name] = path
	}
	if f.concurrency < 1 {
		return server.Config{}, fmt.Errorf("--concurrency %d: must be 1 or more", f.concurrency)
	}
	if f.disableAfter < 0 {
		return server.Config{}, fmt.Errorf("--disable-after %v: must be 0 (never) or more", f.disableAfter)
	}
	if f.metricsTargets < 1 {
		return server.Config{}, fmt.Errorf("--metrics-targets %d: must be 1 or more", f.metricsTargets)
	}
	retry := runlog.RetryPolicy{Attempts: f.retryAttempts, Base: f.retryBase, Cap: f.retryCap, Deadline: f.retryDeadline}
	if !f.retryChosen {
		// Each kind keeps its own default: http jobs a webhook schedule
		// over a day (server.DefaultHTTPRetry), exec jobs these flags'.
		retry = runlog.RetryPolicy{}
	}
	secret, err := f.readSigningSecret()
	if err != nil {
		return server.Config{}, err
	}
	if f.postgres == "" {
		for name, set := range map[string]bool{"--node-id": f.nodeID != "", "--lease": f.lease != 0, "--heartbeat": f.heartbeat != 0} {
			if set {
				return server.Config{}, fmt.Errorf("%s applies to a PostgreSQL store only: add --postgres URL, or drop %s (the journal in --data has one node)", name, name)
			}
		}
	}
	if f.breakerSlowStart < 0 {
		return server.Config{}, fmt.Errorf("--breaker-slow-start %d: must be 0 or more (0 or 1: no slow start)", f.breakerSlowStart)
	}
	if f.maxRetryAfter <= 0 {
		return server.Config{}, fmt.Errorf("--max-retry-after %v: must be positive", f.maxRetryAfter)
	}
	if f.lease < 0 || f.heartbeat < 0 {
		return server.Config{}, fmt.Errorf("--lease %v, --heartbeat %v: durations must be positive", f.lease, f.heartbeat)
	}
	return server.Config{
		Dir:      f.data,
		Postgres: f.postgres,
		PostgresOptions: postgres.Options{
			Node:      f.nodeID,
			Lease:     f.lease,
			Heartbeat: f.heartbeat,
		},
		Addr:  f.addr,
		Token: token,
		Runner: runlog.Config{
			Concurrency:       f.concurrency,
			TargetConcurrency: f.targetConcurrency,
			Timeout:           f.timeout,
			Retry:             retry,
			Breaker:           runlog.BreakerConfig{Threshold: f.breakerThreshold, Window: f.breakerWindow, Cooldown: f.breakerCooldown, Probes: f.breakerProbes, SlowStart: slowStart(f.breakerSlowStart)},
			RateLimit:         f.rateLimitDefault.l,
			Limits:            f.rateLimits,
			QueueLimits:       f.queueRateLimits,
			MaxRetryAfter:     f.maxRetryAfter,
			DisableAfter:      disableAfter(f.disableAfter),
		},
		Commands:            cmds,
		AllowHosts:          f.allowHosts,
		AllowPrivateTargets: f.allowPrivateTargets,
		SigningSecret:       secret,
		Hostnames:           f.hostnames,
		MaxBody:             int64(f.maxBody),
		MetricsTargets:      f.metricsTargets,
		Logger:              log,
		NoDashboard:         !f.dashboard,
		DashboardReadOnly:   f.dashboardReadOnly,
	}, nil
}

// startCPUProfile starts a CPU profile written to name; stop ends it.
func startCPUProfile(name string) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func runServe(args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := newFlagSet("serve", "[flags]", stderr)
	f.register(fs)
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "runlog serve: unexpected argument %q\n", pos[0])
		return exitUsage
	}
	f.noteRetryChosen(fs)
	log, err := f.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "runlog serve:", err)
		return exitUsage
	}
	cfg, err := f.config(log)
	if err != nil {
		fmt.Fprintln(stderr, "runlog serve:", err)
		return exitUsage
	}
	if f.cpuProfile != "" {
		stopProfile, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "runlog serve:", err)
			return exitUsage
		}
		defer stopProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := server.Start(cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return exitFailure
	}
	code = exitOK
	select {
	case <-ctx.Done():
		log.Info("signal received; stopping (a second signal kills at once)", "timeout", f.shutdownTimeout)
	case err := <-srv.Failed():
		log.Error("HTTP server stopped", "err", err)
		code = exitFailure
	}
	stop() // a second signal now ends the process
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return exitFailure
		}
		log.Warn("shutdown timeout reached: attempts still running were cut short and run again after a restart")
	}
	return code
}
