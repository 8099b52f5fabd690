// Package pgstore is the PostgreSQL store of runlog: the engine's storage
// boundary (store.Store) kept in PostgreSQL tables, so that several runlog
// nodes (processes) share one queue.
//
// # Tables
//
// runlog_jobs holds one row per job (its spec, state, due time, budget,
// reason, its latest attempt and the history of the ones before as JSON,
// with the node that ran each); runlog_breakers holds one circuit breaker per target, shared by
// every node; runlog_schema_migrations records the applied migrations (the
// versioned SQL files embedded in this package; see Migrate).
//
// # Decisions
//
// Every decision and every change of a job is the one the embedded store
// makes, by the same code: a row is read into a state.Job, the per-job
// decisions of package state (AdmitJob, SettleJob, OrphanJob) decide on
// its facts, state.Step applies the op to it and its target's breaker, and
// a claim follows state.Planner. What is this store's own is the SQL
// around them: a claim selects due jobs with SELECT … FOR UPDATE SKIP
// LOCKED in (due time, id) order, in rounds, locks their targets'
// breakers, and starts, defers or fails each in one transaction; an
// outcome is decided on the facts the node kept since the claim and
// recorded, with its breaker, in one transaction, by an UPDATE that
// requires the row to still be the node's running attempt.
//
// # Files
//
// rows.go reads and writes job rows (columns, history JSON); enqueue.go,
// breakers.go, claim.go, finish.go (outcomes), rescue.go (expired leases,
// a node's own attempts at open and close), control.go (cancel and
// retry by hand) and read.go (Job, List, Stats, Targets) each hold one operation;
// codes.go names the frozen codes the SQL and the JSON store.
//
// # Nodes, leases and rescue
//
// Each Store is one node with a random id. A started attempt carries the
// node id and a lease on the database clock (clock_timestamp() + Lease), which the node
// renews every Heartbeat for the attempts it has claimed and not finished.
// Every node runs a rescuer (every RescueEvery) that requeues the attempts
// whose lease expired as failed attempts (state.OrphanJob: one failure
// of the job, none of its target). An outcome is recorded only if its attempt
// is still open and was started by the reporting node (fencing): a node
// presumed dead cannot settle an attempt that was rescued; its outcome is
// logged and dropped.
//
// Due times, decisions and retention use the time the engine passes in (its
// clock); leases use the database clock, so nodes with skewed clocks agree
// on expiry. Rescue stamps its changes with Options.Now.
//
// # Wake-ups
//
// Every node LISTENs on runlog_wake and wakes its dispatcher. After its
// own enqueues, retries and deferrals commit, a node NOTIFYs runlog_wake
// from a transaction of its own (wakeNodes; not in theirs: notifying
// transactions commit one at a time). EnqueueTx NOTIFYs in the caller's
// transaction. A cancel of a job running on another node NOTIFYs
// runlog_cancel, and that node cancels the attempt's context. A fallback
// poll (PollEvery) wakes the dispatcher in case a notification was lost.
package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// Notification channels.
const (
	chanWake   = "runlog_wake"
	chanCancel = "runlog_cancel"
)

// Options configure Open. The zero value of each field takes the default
// written next to it.
type Options struct {
	// Circuit configures every target's breaker. It must be the same on
	// every node. Defaults to retry.DefaultCircuit().
	Circuit retry.Circuit
	// DisableAfterMS disables a target failing this long with no success
	// (state.DisableRule); 0 never does. It should be the same on every
	// node.
	DisableAfterMS int64
	// Now is the clock (ms since the Unix epoch) that stamps rescues; the
	// engine's own calls pass their now. Defaults to the system clock.
	Now func() int64
	// Migrate applies missing migrations at Open; without it Open fails
	// with ErrSchemaOld on a database that lacks them.
	Migrate bool
	// Node names this node in the jobs it runs. Defaults to
	// host-pid-random; it must be unique among live nodes.
	Node string
	// Lease is how long a started attempt stays this node's without a
	// heartbeat. Defaults to 5s. It must be at least MinLeaseHeartbeats
	// heartbeats: a shorter lease expires while its attempt still runs
	// whenever a renewal is late, and the attempt runs twice.
	Lease time.Duration
	// Heartbeat is how often the node renews the leases of its attempts:
	// at least MinHeartbeat, at most Lease / MinLeaseHeartbeats. Defaults
	// to Lease / 5 within [MinHeartbeat, 1s] (1s with the default lease).
	Heartbeat time.Duration
	// RescueEvery is how often the node requeues attempts whose lease
	// expired. Defaults to 1s.
	RescueEvery time.Duration
	// PollEvery is how often the node looks for due jobs without a
	// notification. Defaults to 1s.
	PollEvery time.Duration
	// Retention says how long finished jobs are kept; nil keeps them
	// forever. Expire applies it.
	Retention *state.Retention
	// Limits are the configured rate limits (nil for none); like Circuit,
	// they must be the same on every node.
	Limits *state.LimitConfig
	// MaxConns bounds the connection pool (the notification listener
	// takes one more). Defaults to 10.
	MaxConns int32
	// Logger receives rescues, fenced outcomes and connection trouble.
	// Defaults to slog.Default().
	Logger *slog.Logger

	// migrations, when set, are the migrations this node knows instead of
	// the embedded ones: the upgrade tests run a node of an older build
	// (fewer) and of a newer one (more) in one process.
	migrations []migration
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	if o.Circuit == (retry.Circuit{}) {
		o.Circuit = retry.DefaultCircuit()
	}
	if o.Now == nil {
		o.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if o.Node == "" {
		host, _ := os.Hostname()
		var b [4]byte
		rand.Read(b[:])
		o.Node = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Lease, 5*time.Second)
	def(&o.Heartbeat, min(max(o.Lease/5, MinHeartbeat), time.Second))
	def(&o.RescueEvery, time.Second)
	def(&o.PollEvery, time.Second)
	if o.MaxConns == 0 {
		o.MaxConns = 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// validate reports the first unusable field of defaulted options.
func (o Options) validate() error {
	if err := o.Circuit.Validate(); err != nil {
		return fmt.Errorf("pgstore: Circuit: %w", err)
	}
	if len(o.Node) > maxNode || strings.ContainsFunc(o.Node, unicode.IsControl) || !utf8.ValidString(o.Node) {
		return fmt.Errorf("pgstore: Node %q: a node id is at most %d bytes of printable UTF-8 (a host or pod name)", o.Node, maxNode)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Lease", o.Lease}, {"Heartbeat", o.Heartbeat}, {"RescueEvery", o.RescueEvery}, {"PollEvery", o.PollEvery}} {
		if d.v < time.Millisecond {
			return fmt.Errorf("pgstore: %s %v must be at least 1ms", d.name, d.v)
		}
	}
	if floor := MinLeaseHeartbeats * MinHeartbeat; o.Lease < floor {
		return fmt.Errorf("pgstore: Lease %v is below %v (%d heartbeats of at least %v): one late renewal would let a rescuer take back attempts "+
			"that still run, and run them twice; set Lease to %v or more, and Heartbeat between %v and Lease/%d",
			o.Lease, floor, MinLeaseHeartbeats, MinHeartbeat, floor, MinHeartbeat, MinLeaseHeartbeats)
	}
	if o.Heartbeat < MinHeartbeat || o.Lease < MinLeaseHeartbeats*o.Heartbeat {
		return fmt.Errorf("pgstore: Heartbeat %v with Lease %v is unsafe: a renewal can take longer than %v on a busy server, and the lease must "+
			"span %d heartbeats so that a late renewal does not let a rescuer run the attempt twice; set Heartbeat between %v and %v (Lease/%d)",
			o.Heartbeat, o.Lease, MinHeartbeat, MinLeaseHeartbeats, MinHeartbeat, o.Lease/MinLeaseHeartbeats, MinLeaseHeartbeats)
	}
	return nil
}

// maxNode bounds a node id: it is stored in every attempt's JSON and sent
// in cancel notifications.
const maxNode = 200

// The safe range of Options.Lease and Options.Heartbeat (see validate).
const (
	// MinHeartbeat is the shortest Heartbeat: a renewal is one UPDATE and
	// its commit's WAL flush, a few ms on a healthy server, tens of ms on
	// a loaded one (a checkpoint, a full fsync queue); a heartbeat shorter
	// than that makes renewals queue behind each other.
	MinHeartbeat = 100 * time.Millisecond
	// MinLeaseHeartbeats is how many heartbeats a Lease spans at least,
	// so that two renewals in a row may be late or fail (a connection
	// dropped and dialled again, a stalled server) before an attempt that
	// still runs is taken back.
	MinLeaseHeartbeats = 3
)

// Store is the PostgreSQL store; it implements store.Store. Open one per
// node with Open.
type Store struct {
	opts Options
	url  string
	pool *pgxpool.Pool
	log  *slog.Logger

	ctx    context.Context // cancelled by Close: stops the background loops
	cancel context.CancelFunc
	loops  sync.WaitGroup
	hbConn *pgx.Conn // the heartbeat's connection: only the heartbeat loop, then Close, use it

	notifyNodes chan struct{} // wakeNodes → the notifier; holds one pending request

	groups insertGroups // the single-job enqueues inserted together (group.go)

	mu       sync.Mutex
	closed   bool              // guarded by mu
	notify   store.Notify      // guarded by mu
	inflight map[uint64]flight // guarded by mu: attempts claimed here and not finished
	bounded  map[string]bool   // guarded by mu: the queues with a concurrency, at the last claim
	plain    bool              // guarded by mu: no queue had a setting at the last claim (plainQueues)
	due      dueCache          // guarded by mu
	// trouble: the targets whose breaker was not the zero one at the last
	// read (guarded by mu); an outcome batch locks them up front.
	trouble map[string]bool
	// disabled holds the targets this node last saw disabled (guarded by
	// mu; lifecycle.go): their jobs' due times do not move the cached
	// next due time.
	disabled map[string]bool
}

// flight is an attempt this node claimed and has not finished: what its
// outcome is decided on. While the attempt runs (its row in state running,
// started by this node, with this attempt as the latest), nothing else
// changes these facts of the job: a cancel or a rescue moves the row out of
// that state first. So an outcome is decided on them without reading the
// row, and recorded by an UPDATE that requires the row to be in that state.
//
// The attempt's number is facts.Started (a start makes it the job's latest
// attempt), not a field of its own: at 128 bytes or less a flight is kept
// in the inflight map itself, one allocation a claimed job less.
type flight struct {
	startedAt int64 // the attempt's start, as its entry in the history says
	target    string
	facts     state.Facts
}

// attempt is the number of the flight's attempt.
func (f flight) attempt() uint32 { return f.facts.Started }

// dueCache caches the earliest due time among pending jobs, so that the
// dispatcher's NextDue does not query on every look.
type dueCache struct {
	valid bool
	at    int64
	has   bool
	gen   uint64 // bumped by every invalidation
}

var (
	_ store.Store              = (*Store)(nil)
	_ store.ConcurrentFinisher = (*Store)(nil)
	_ store.AsyncOutcomes      = (*Store)(nil)
)

// Open connects to the database at url (a PostgreSQL connection string),
// applies missing migrations when opts.Migrate is set (otherwise it checks
// that none is missing), and starts the node's listener, heartbeat,
// rescuer and poller. Close stops them.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	known := opts.migrations
	if known == nil {
		var err error
		if known, err = migrations(); err != nil {
			return nil, err
		}
	}
	if opts.Migrate {
		if _, err := migrateKnown(ctx, url, known); err != nil {
			return nil, err
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connection string: %w", err)
	}
	cfg.MaxConns = opts.MaxConns
	// No JIT: every statement runlog sends reads or writes a few rows,
	// but a generic plan's estimate of the claim's per-queue probes (and
	// enable_sort off, see claimPlans) can pass jit_above_cost, and compiling
	// takes 40-250 ms where the statement itself takes under one.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	have, err := currentVersion(ctx, pool)
	if err == nil && have < len(known) {
		err = fmt.Errorf("%w: database at version %d, this build needs %d; run `runlog migrate` (or open with migrations enabled)", ErrSchemaOld, have, len(known))
	} else if err == nil && have > len(known) {
		// A newer build migrated the database: run on it if every step
		// past this build's was an expand step (a rolling upgrade).
		err = checkVersion(ctx, pool, have, len(known))
		if err == nil {
			opts.Logger.Info("pgstore: the database schema is newer than this build, and builds of this one run on it (a rolling upgrade)", "database", have, "build", len(known))
		}
	}
	if err != nil {
		pool.Close()
		return nil, err
	}
	s := &Store{opts: opts, url: url, pool: pool, log: opts.Logger, inflight: make(map[uint64]flight), trouble: make(map[string]bool), notifyNodes: make(chan struct{}, 1)}
	// A node that restarts under the same id (a stable Options.Node) takes
	// back at once what its previous process left running, as the embedded
	// store does at open, instead of waiting for the leases to expire.
	if n, err := s.requeue(ctx, "state = "+runningCode+" AND node = $1", []any{opts.Node}, fmt.Sprintf("node %s restarted", opts.Node)); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgstore: requeue the attempts this node's previous process left running: %w", err)
	} else if n > 0 {
		s.log.Info("pgstore: requeued the attempts this node's previous process left running", "jobs", n, "node", opts.Node)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loops.Add(5)
	go s.listen()
	go s.notifier()
	go s.every(opts.Heartbeat, s.heartbeat)
	go s.every(opts.RescueEvery, func() {
		if n, err := s.Rescue(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("pgstore: rescue of expired leases failed; retrying at the next scan", "err", err)
		} else if n > 0 {
			s.log.Info("pgstore: requeued attempts whose lease expired", "jobs", n, "node", s.opts.Node)
		}
	})
	go s.every(opts.PollEvery, func() {
		s.invalidate()
		s.wake()
	})
	return s, nil
}

// Finishers tells the engine to settle outcomes with two Finish calls side
// by side: each is a transaction on a connection of its own, and while one
// waits for the database (its statements, its commit's WAL flush) the other
// decides and encodes, so the two cores the database and the node share
// are both at work. W1 processing at concurrency 256 (BenchmarkPostgresW1,
// nodes=1) went from 9 700-11 000 to 12 000-12 800 jobs/s. Their claims
// skip each other's rows (SKIP LOCKED), and a breaker they both change is
// locked by one at a time.
//
// Below 64 slots it asks for one: a transaction then carries all the
// outcomes that end together instead of half of them, and a second one
// brought no throughput, only its overhead (W1 at concurrency 16, 10 000
// no-op jobs: 6 500-9 100 jobs/s at 68-90 us of the server's CPU per job
// with one, 5 500-6 500 at 152-174 us with two; at 32 about even, at 256
// two take 17 000 against one's 12 000).
func (s *Store) Finishers(concurrency int) int {
	if concurrency < 64 {
		return 1
	}
	return 2
}

// AsyncOutcomes implements store.AsyncOutcomes: the engine frees a slot
// when its handler returns and records outcomes in background batches
// (Finish without a claim), filling slots by Claim. An outcome batch and a
// claim are transactions either way; what changes is that a slot no longer
// waits for its outcome's commit before it runs the next job, which at 16
// slots had bounded each slot to one job per transaction. Fencing is
// unchanged: the attempt stays in flight, its lease renewed, until Finish
// records its outcome; a node that dies first leaves it running, and it is
// requeued as any attempt of a dead node is (lease expiry, or at once by
// the node's next process under the same id).
func (s *Store) AsyncOutcomes() bool { return true }

// Node returns this node's id.
func (s *Store) Node() string { return s.opts.Node }

// Pool returns the store's connection pool (for callers that enqueue in
// their own transactions with EnqueueTx).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// every runs fn every d until Close.
func (s *Store) every(d time.Duration, fn func()) {
	defer s.loops.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// listen keeps a connection that LISTENs for wake-ups and cancels,
// reconnecting (and waking the dispatcher, since notifications may have
// been missed) after a failure.
func (s *Store) listen() {
	defer s.loops.Done()
	backoff := 10 * time.Millisecond
	for s.ctx.Err() == nil {
		err := s.listenOnce()
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("pgstore: the notification connection failed; reconnecting (the poll covers the gap)", "err", err, "retry_in", backoff)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// listenOnce runs one notification connection until it fails or Close.
func (s *Store) listenOnce() error {
	conn, err := pgx.Connect(s.ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(s.ctx, "LISTEN "+chanWake+"; LISTEN "+chanCancel+"; LISTEN "+chanSchedules); err != nil {
		return err
	}
	s.invalidate()
	s.wake()
	s.schedulesChanged()
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case chanWake:
			if n.Payload == s.opts.Node {
				// This node's own notifier: the change was made here,
				// and the cache and the dispatcher know of it.
				continue
			}
			s.invalidate()
			s.wake()
		case chanCancel:
			s.cancelNotified(n.Payload)
		case chanSchedules:
			if n.Payload != s.opts.Node {
				s.schedulesChanged()
			}
		}
	}
}

// cancelNotified handles a runlog_cancel payload "<id> <node>": if the
// attempt runs here, the engine cancels its context. Any client of the
// database can notify the channel, so anything else is ignored.
func (s *Store) cancelNotified(payload string) {
	id, ok := parseCancel(payload, s.opts.Node)
	if !ok {
		return
	}
	s.mu.Lock()
	_, running := s.inflight[id]
	fn := s.notify.CancelAttempt
	s.mu.Unlock()
	if running && fn != nil {
		fn(id)
	}
}

// cancelPayload is the runlog_cancel payload for job id running on node.
func cancelPayload(id uint64, node string) string {
	return strconv.FormatUint(id, 10) + " " + node
}

// parseCancel reads a runlog_cancel payload and reports the job id if the
// payload is exactly cancelPayload(id, node) for this node.
func parseCancel(payload, node string) (uint64, bool) {
	num, rest, ok := strings.Cut(payload, " ")
	if !ok || rest != node {
		return 0, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != num {
		return 0, false
	}
	return id, true
}

// wakeNodes asks the notifier to NOTIFY runlog_wake: jobs this node
// committed may be due, or due at a time other nodes' cached next due time
// does not know. Requests made while a NOTIFY is under way are covered by
// one more, so a burst of enqueues costs the nodes few wake-ups and the
// database few notifying commits. It does not block.
func (s *Store) wakeNodes() {
	select {
	case s.notifyNodes <- struct{}{}:
	default:
	}
}

// notifier sends the NOTIFYs wakeNodes asks for, each in a transaction of
// its own after the change it announces has committed, so that the changes'
// transactions do not take the lock that serializes notifying commits. A
// NOTIFY lost with the process or the connection is covered by every
// node's fallback poll (PollEvery).
func (s *Store) notifier() {
	defer s.loops.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.notifyNodes:
		}
		if _, err := s.pool.Exec(s.ctx, "SELECT pg_notify($1, $2)", chanWake, s.opts.Node); err != nil && s.ctx.Err() == nil {
			s.log.Warn("pgstore: notifying the other nodes failed; they see the change at their next poll", "err", err)
		}
	}
}

// wake tells the engine that jobs may have become due.
func (s *Store) wake() {
	s.mu.Lock()
	fn := s.notify.Wake
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// dueAdded records that a job due at due was added here: the cached next
// due time, if valid, moves to it if it is earlier, and a claim under way
// (which may not have seen the job) does not overwrite the cache.
func (s *Store) dueAdded(due int64) {
	s.mu.Lock()
	if s.due.valid && (!s.due.has || due < s.due.at) {
		s.due.at, s.due.has = due, true
	}
	s.due.gen++
	s.mu.Unlock()
}

// invalidate drops the cached next due time.
func (s *Store) invalidate() {
	s.mu.Lock()
	s.due.valid = false
	s.due.gen++
	s.mu.Unlock()
}

// heartbeat renews the leases of the attempts this node claimed and has not
// finished, on a connection of its own (hbConn), so that a busy pool does
// not delay it past a lease. It runs every Heartbeat, on one goroutine.
func (s *Store) heartbeat() {
	s.mu.Lock()
	ids := make([]int64, 0, len(s.inflight))
	for id := range s.inflight {
		ids = append(ids, int64(id))
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	var err error
	if s.hbConn == nil {
		s.hbConn, err = pgx.Connect(s.ctx, s.url)
	}
	if err == nil {
		// Rows another transaction holds are skipped, not waited for: an
		// outcome batch of this node settling them (it would otherwise
		// deadlock with the heartbeat, which locks rows in another order,
		// and stall both for deadlock_timeout), or a rescue or cancel,
		// after which the lease does not matter. A row skipped now and
		// still running is renewed by the next heartbeat.
		_, err = s.hbConn.Exec(s.ctx, `UPDATE runlog_jobs SET lease_until = clock_timestamp() + $3 * interval '1 millisecond'
			WHERE id IN (SELECT id FROM runlog_jobs WHERE id = ANY($1) AND state = `+runningCode+` AND node = $2 FOR UPDATE SKIP LOCKED)`,
			ids, s.opts.Node, s.opts.Lease.Milliseconds())
	}
	if err != nil && s.ctx.Err() == nil {
		s.log.Warn("pgstore: lease heartbeat failed; other nodes rescue these attempts if it keeps failing past the lease", "err", err, "attempts", len(ids), "lease", s.opts.Lease)
		if s.hbConn != nil {
			s.hbConn.Close(context.Background())
			s.hbConn = nil
		}
	}
}

// Expire implements store.Store: it deletes the finished jobs whose
// retention (Options.Retention, by state and kind) ran out by now, which
// releases their keys, in batches of expireBatch for up to expireFor. A
// job expires at the end of the bucket of width ttl/16 its expiry time
// falls in (state.PartOf, the embedded store's partitions), so that both
// stores keep and drop the same jobs, and first settles the targets' flows
// (settleFlows). The engine calls it periodically. A
// failed delete is logged, not returned: it is tried again at the next
// call, and a transient database error must not stop the runner.
func (s *Store) Expire(ctx context.Context, now int64) error {
	r := s.opts.Retention
	if r == nil {
		return nil
	}
	if err := s.usable(); err != nil {
		return err
	}
	if err := s.settleFlows(ctx, now); err != nil && ctx.Err() == nil {
		s.log.Warn("pgstore: settling the targets' flows failed; trying again at the next expiry", "err", err)
	}
	sql, args, ok := expireSQL(r, now, expireBatch)
	if !ok {
		return nil // every finished job is kept forever
	}
	until := time.Now().Add(expireFor)
	for {
		tag, err := s.pool.Exec(ctx, sql, args...)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("pgstore: deleting finished jobs past retention failed; trying again at the next expiry", "err", err)
			}
			return nil
		}
		if tag.RowsAffected() < expireBatch || !time.Now().Before(until) || ctx.Err() != nil {
			return nil
		}
	}
}

// expireBatch bounds the jobs one retention DELETE removes, and expireFor
// the time one Expire spends deleting: a backlog (retention shortened,
// or the first expiry on a large table) is worked off over several calls
// in short transactions, not in one that locks millions of rows.
const (
	expireBatch = 10000
	expireFor   = 10 * time.Second
)

// expireSQL is the retention DELETE at now and its arguments, or !ok when
// the rules keep every finished job. Each row's cutoff depends on its state
// and kind (now minus that kind's retention for that state), which no index
// can range over; so the statement first bounds each finished state by its
// shortest retention of any kind (a range of runlog_jobs_expiry, (state,
// finished_at) of finished jobs), then checks each candidate's own rule. A
// state that every kind keeps forever gets the cutoff -1, which no row
// (finished_at >= 0) is below.
func expireSQL(r *state.Retention, now int64, limit int) (sql string, args []any, ok bool) {
	kinds := make([]string, len(r.PerKind))
	succ, canc, fail := make([]int64, len(r.PerKind)), make([]int64, len(r.PerKind)), make([]int64, len(r.PerKind))
	shortest := [3]int64{r.SucceededMS, r.FailedMS, r.CancelledMS} // by state - 2
	for i, k := range r.PerKind {
		kinds[i], succ[i], canc[i], fail[i] = k.Kind, k.SucceededMS, k.CancelledMS, k.FailedMS
		for st, ttl := range [3]int64{k.SucceededMS, k.FailedMS, k.CancelledMS} {
			if ttl > 0 && (shortest[st] <= 0 || ttl < shortest[st]) {
				shortest[st] = ttl
			}
		}
	}
	var cutoff [3]int64
	for st, ttl := range shortest {
		cutoff[st] = -1
		if ttl > 0 {
			cutoff[st], ok = now-ttl, true
		}
	}
	bound := func(t string) string {
		return `(` + t + `.state = ` + succeededCode + ` AND ` + t + `.finished_at <= $9) OR (` + t + `.state = ` + failedCode + ` AND ` + t + `.finished_at <= $10)
			OR (` + t + `.state = ` + cancelledCode + ` AND ` + t + `.finished_at <= $11)`
	}
	// The ids come as an array (an InitPlan), not as "id IN (SELECT …)",
	// which the planner joined with a scan of the whole table. The outer
	// bound is checked again on a row changed meanwhile (a retry by hand).
	return `DELETE FROM runlog_jobs d WHERE d.id = ANY(ARRAY(SELECT j.id FROM runlog_jobs j
		WHERE (` + bound("j") + `)
		AND EXISTS (SELECT 1 FROM (SELECT COALESCE(
			(SELECT CASE j.state WHEN ` + succeededCode + ` THEN r.s WHEN ` + cancelledCode + ` THEN r.c ELSE r.f END
				FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(kind, s, c, f) WHERE r.kind = j.kind),
			CASE j.state WHEN ` + succeededCode + ` THEN $5::bigint WHEN ` + cancelledCode + ` THEN $6::bigint ELSE $7::bigint END) AS ttl) t
			WHERE t.ttl > 0 AND j.finished_at <= $8::bigint - t.ttl
				AND ((j.finished_at + t.ttl) / GREATEST(t.ttl / 16, 1) + 1) * GREATEST(t.ttl / 16, 1) <= $8::bigint)
		LIMIT $12)) AND (` + bound("d") + `)`,
		[]any{kinds, succ, canc, fail, r.SucceededMS, r.CancelledMS, r.FailedMS, now, cutoff[0], cutoff[1], cutoff[2], limit}, ok
}

// usable reports why the store takes no call, or nil.
func (s *Store) usable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	return nil
}

// maxTries bounds the attempts of one transaction that hit a deadlock, a
// serialization failure or (when safe) a lost connection.
const maxTries = 10

// inTx runs fn in a transaction and commits it, trying again after a
// deadlock or serialization failure, and, when idempotent is set (the
// caller's effect is safe to repeat or is fenced), after a connection
// failure too. fn may run more than once: it must reset what it collects.
func (s *Store) inTx(ctx context.Context, idempotent bool, fn func(pgx.Tx) error) error {
	return retrying(ctx, idempotent, func() error { return pgx.BeginFunc(ctx, s.pool, fn) })
}

// retrying runs once, and again, up to maxTries in all, with backoff,
// while it fails with a deadlock or serialization failure, or (when
// idempotent) a connection failure.
func retrying(ctx context.Context, idempotent bool, once func() error) error {
	backoff := 5 * time.Millisecond
	for try := 1; ; try++ {
		err := once()
		if err == nil || try == maxTries || ctx.Err() != nil || !retryable(err, idempotent) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second)
	}
}

// querier is what the statements of a transaction are sent through: a
// pgx.Tx (inTx) or a connection whose BEGIN and COMMIT travel in batches
// (inPipeTx).
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendBatch runs the queued statements of b in tx.
func sendBatch(ctx context.Context, tx querier, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// inPipeTx is inTx for the transactions of claims and outcome batches,
// without the two round trips of BEGIN and COMMIT: fn gets a batch that
// holds BEGIN, which it must send, with statements of its own queued
// after it, before it sends anything else; COMMIT is queued after the
// batch fn returns (nil for none), and the two are sent together. A fn of
// one round trip returns first itself, unsent: BEGIN, its statements and
// COMMIT then go together. A transaction that fails is rolled back (or
// its connection, if that fails, dropped from the pool). As with inTx, fn
// may run more than once.
func (s *Store) inPipeTx(ctx context.Context, fn func(tx querier, first *pgx.Batch) (*pgx.Batch, error)) error {
	return retrying(ctx, true, func() error { return s.pipeTxOnce(ctx, fn) })
}

// pipeTxOnce runs fn once for inPipeTx.
func (s *Store) pipeTxOnce(ctx context.Context, fn func(tx querier, first *pgx.Batch) (*pgx.Batch, error)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var first pgx.Batch
	first.Queue("BEGIN")
	last, err := fn(conn, &first)
	if err == nil {
		if last == nil {
			last = &pgx.Batch{}
		}
		last.Queue("COMMIT")
		err = conn.SendBatch(ctx, last).Close()
	}
	if err != nil && conn.Conn().PgConn().TxStatus() != 'I' {
		// A failed statement aborted the transaction, or fn stopped
		// before COMMIT. Release would drop a connection still in a
		// transaction; a ROLLBACK keeps it.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, rerr := conn.Exec(rctx, "ROLLBACK"); rerr != nil {
			conn.Conn().Close(rctx)
		}
	}
	return err
}

// retryable reports whether a failed transaction may run again.
func retryable(err error, idempotent bool) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40P01" || pe.Code == "40001" // deadlock, serialization
	}
	return idempotent && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// SetNotify implements store.Store.
func (s *Store) SetNotify(n store.Notify) {
	s.mu.Lock()
	s.notify = n
	s.mu.Unlock()
}

// Close implements store.Store: it stops the node's loops, requeues the
// attempts this node started and never finished (as failed attempts, so
// they run again at once instead of after their lease), and closes the
// connections. It is idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.loops.Wait()
	if s.hbConn != nil {
		s.hbConn.Close(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.requeue(ctx, "state = "+runningCode+" AND node = $1", []any{s.opts.Node}, fmt.Sprintf("node %s closed", s.opts.Node))
	s.pool.Close()
	if err != nil {
		return fmt.Errorf("pgstore: close: requeue this node's unfinished attempts (their leases expire and other nodes requeue them): %w", err)
	}
	return nil
}
