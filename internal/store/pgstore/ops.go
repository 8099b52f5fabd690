package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// maxDecisionsPerClaim bounds the deferrals and failures one Claim makes, as
// in the embedded store, so that a flood of due jobs behind an open breaker
// cannot make one claim unbounded.
const maxDecisionsPerClaim = 4096

// minClaimRound is the fewest due rows a later round of a claim selects
// (one after a round that deferred or failed jobs), so that a claim for few
// attempts behind many deferrals needs few rounds. The first round selects
// only one row more than it may start: each row selected is locked (a WAL
// record and a dirtied page), and with 16 slots a claim starts about 8.
const minClaimRound = 32

// maxRequeue bounds the attempts one rescue requeues; the next scan takes
// the rest.
const maxRequeue = 1000

// jobCols are the columns scanRow reads, in order.
const jobCols = `id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms,
	due, first_due, enqueued_at, finished_at, fails, started, last_error, reason, history, latest, node`

// jobColsNoPayload are jobCols without the payload (read as NULL), for the
// transactions that settle attempts and do not need it.
var jobColsNoPayload = strings.Replace(jobCols, "payload", "NULL::bytea", 1)

// scanRow reads the jobCols of one row.
func scanRow(row pgx.Row) (*jobRow, error) {
	var (
		r           jobRow
		id, started int64
		st          int16
		hist        []byte
		latest      *string
	)
	p := &r.spec.Policy
	err := row.Scan(&id, &st, &r.spec.Kind, &r.spec.Target, &r.spec.Payload, &r.spec.Key,
		&p.Attempts, &p.BaseMS, &p.CapMS, &p.DeadlineMS, &r.spec.TimeoutMS,
		&r.due, &r.firstDue, &r.enqueuedAt, &r.finishedAt, &r.fails, &started, &r.lastError, &r.reason, &hist, &latest, &r.node)
	if err != nil {
		return nil, err
	}
	r.id, r.st, r.started = uint64(id), state.JobState(st), uint32(started)
	if r.hist, err = readHistory(hist, latest); err != nil {
		return nil, fmt.Errorf("pgstore: job %d: %w", id, err)
	}
	return &r, nil
}

// readHistory joins a row's history and latest columns into its attempts,
// oldest first, at most state.MaxAttemptHistory. They are in attempt
// order already, unless a node older than schema version 3 wrote attempts
// into history after the migration (which the migration asks not to
// allow): then they are sorted, so that the latest attempt is still last.
func readHistory(hist []byte, latest *string) ([]attempt, error) {
	var h []attempt
	if err := json.Unmarshal(hist, &h); err != nil {
		return nil, fmt.Errorf("history column is not runlog's JSON: %w", err)
	}
	if latest == nil {
		return h, nil
	}
	var a attempt
	if err := json.Unmarshal([]byte(*latest), &a); err != nil {
		return nil, fmt.Errorf("latest column is not runlog's JSON: %w", err)
	}
	if n := len(h); n > 0 && h[n-1].N >= a.N {
		h = append(h, a)
		slices.SortStableFunc(h, func(x, y attempt) int { return cmp.Compare(x.N, y.N) })
		return h[max(len(h)-state.MaxAttemptHistory, 0):], nil
	}
	return addAttempt(h, a), nil
}

// splitHistory is the inverse of readHistory: the history column (every
// attempt but the latest, as JSON) and the latest column ("" for none).
func splitHistory(h []attempt) (hist, latest string) {
	if len(h) == 0 {
		return "[]", ""
	}
	older := []byte{'['}
	for i, a := range h[:len(h)-1] {
		if i > 0 {
			older = append(older, ',')
		}
		older = appendAttempt(older, a)
	}
	older = append(older, ']')
	return string(older), string(appendAttempt(nil, h[len(h)-1]))
}

// queryRows runs a query of jobCols and reads every row.
func queryRows(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]*jobRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*jobRow
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Enqueue implements store.Store: the jobs are inserted, and the nodes
// notified, in one transaction.
func (s *Store) Enqueue(ctx context.Context, now int64, jobs []store.NewJob) ([]store.Enqueued, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(jobs) == 1 && jobs[0].Spec.Key == "" {
		out, err := s.enqueueOne(ctx, now, &jobs[0])
		if err != nil {
			return nil, fmt.Errorf("pgstore: enqueue (nothing was added): %w", err)
		}
		s.dueAdded(jobs[0].Due)
		s.wakeNodes()
		return out, nil
	}
	var out []store.Enqueued
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		var err error
		out, err = enqueueTx(ctx, tx, now, jobs, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue (nothing was added): %w", err)
	}
	for i, e := range out {
		if !e.Existing {
			s.dueAdded(jobs[i].Due)
		}
	}
	s.wakeNodes()
	return out, nil
}

// enqueueOne inserts one job without a key in one statement (its own
// transaction): one round trip, where a transaction would take four (BEGIN,
// draw the id, insert, COMMIT). The columns are EnqueueTx's.
func (s *Store) enqueueOne(ctx context.Context, now int64, j *store.NewJob) ([]store.Enqueued, error) {
	sp := &j.Spec
	var id int64
	err := s.pool.QueryRow(ctx, `WITH ins AS (INSERT INTO runlog_jobs
			(id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at)
			VALUES (nextval('runlog_job_id'), 0, $1, $2, $3, '', $4, $5, $6, $7, $8, $9, $9, $10)
			RETURNING id)
		SELECT id FROM ins`,
		sp.Kind, sp.Target, sp.Payload, int32(sp.Policy.Attempts), sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS,
		sp.TimeoutMS, j.Due, now).Scan(&id)
	if err != nil {
		return nil, err
	}
	return []store.Enqueued{{ID: uint64(id)}}, nil
}

// EnqueueTx inserts jobs in the caller's transaction tx and NOTIFYs the
// nodes in it, so the jobs exist, and the nodes wake, if and only if tx
// commits. Ids are answered in order; a job whose idempotency key is held
// (by a kept job, or by an earlier job of the batch) answers the holder's id
// with Existing set and adds nothing. The jobs must be valid (the engine's
// rules: a kind, a valid policy); now stamps their enqueue time.
func EnqueueTx(ctx context.Context, tx pgx.Tx, now int64, jobs []store.NewJob) ([]store.Enqueued, error) {
	return enqueueTx(ctx, tx, now, jobs, true)
}

// enqueueTx is EnqueueTx; without notify it leaves the NOTIFY to the
// caller. A transaction that NOTIFYs holds a lock that serializes the
// commits of every notifying transaction of the database until it has
// committed, its WAL flush included, so the store's own enqueues commit
// without it and wake the nodes afterwards (Store.wakeNodes), letting
// concurrent enqueues share their WAL flushes.
func enqueueTx(ctx context.Context, tx pgx.Tx, now int64, jobs []store.NewJob, notify bool) ([]store.Enqueued, error) {
	out := make([]store.Enqueued, len(jobs))
	var keys []string
	for _, j := range jobs {
		if j.Spec.Key != "" {
			keys = append(keys, j.Spec.Key)
		}
	}
	held := make(map[string]uint64)
	if len(keys) > 0 {
		if err := keyHolders(ctx, tx, keys, held); err != nil {
			return nil, err
		}
	}
	var (
		fresh     []int          // indexes of the jobs to insert
		firstWith map[string]int // key → index of the batch's first job with it
		dupOf     = make(map[int]int)
	)
	for i, j := range jobs {
		if k := j.Spec.Key; k != "" {
			if id, ok := held[k]; ok {
				out[i] = store.Enqueued{ID: id, Existing: true}
				continue
			}
			if first, ok := firstWith[k]; ok {
				dupOf[i] = first
				continue
			}
			if firstWith == nil {
				firstWith = make(map[string]int)
			}
			firstWith[k] = i
		}
		fresh = append(fresh, i)
	}
	if len(fresh) == 0 {
		return out, nil
	}
	ids, err := nextIDs(ctx, tx, len(fresh))
	if err != nil {
		return nil, err
	}
	var (
		cols               = make([]int64, len(fresh))
		kinds, targets, ks = make([]string, len(fresh)), make([]string, len(fresh)), make([]string, len(fresh))
		payloads           = make([][]byte, len(fresh))
		atts               = make([]int32, len(fresh))
		base, capMS, dl    = make([]int64, len(fresh)), make([]int64, len(fresh)), make([]int64, len(fresh))
		tmo, due           = make([]int64, len(fresh)), make([]int64, len(fresh))
	)
	for n, i := range fresh {
		sp := &jobs[i].Spec
		cols[n], kinds[n], targets[n], ks[n], payloads[n] = ids[n], sp.Kind, sp.Target, sp.Key, sp.Payload
		atts[n], base[n], capMS[n], dl[n] = int32(sp.Policy.Attempts), sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS
		tmo[n], due[n] = sp.TimeoutMS, jobs[i].Due
		out[i] = store.Enqueued{ID: uint64(ids[n])}
	}
	rows, err := tx.Query(ctx, `INSERT INTO runlog_jobs
		(id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at)
		SELECT id, 0, kind, target, payload, key, att, base, cap, dl, tmo, due, due, $12
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::int[],
			$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[])
			AS u(id, kind, target, payload, key, att, base, cap, dl, tmo, due)
		ON CONFLICT (key) WHERE key <> '' DO NOTHING
		RETURNING id`, cols, kinds, targets, payloads, ks, atts, base, capMS, dl, tmo, due, now)
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert jobs: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert jobs: %w", err)
	}
	if len(inserted) < len(fresh) {
		// A concurrent transaction committed a job with one of the keys
		// meanwhile: answer its id.
		got := make(map[int64]bool, len(inserted))
		for _, id := range inserted {
			got[id] = true
		}
		for n, i := range fresh {
			if got[ids[n]] {
				continue
			}
			var id int64
			if err := tx.QueryRow(ctx, "SELECT id FROM runlog_jobs WHERE key = $1", ks[n]).Scan(&id); err != nil {
				return nil, fmt.Errorf("pgstore: key %q was taken by a concurrent enqueue that this transaction cannot see yet; enqueue again: %w", ks[n], err)
			}
			out[i] = store.Enqueued{ID: uint64(id), Existing: true}
		}
	}
	for i, first := range dupOf {
		out[i] = store.Enqueued{ID: out[first].ID, Existing: true}
	}
	if !notify {
		return out, nil
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", chanWake); err != nil {
		return nil, fmt.Errorf("pgstore: notify: %w", err)
	}
	return out, nil
}

// keyHolders adds the holder of each held key among keys to held.
func keyHolders(ctx context.Context, tx pgx.Tx, keys []string, held map[string]uint64) error {
	rows, err := tx.Query(ctx, "SELECT key, id FROM runlog_jobs WHERE key = ANY($1)", keys)
	if err != nil {
		return fmt.Errorf("pgstore: look up keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			return err
		}
		held[k] = uint64(id)
	}
	return rows.Err()
}

// nextIDs draws n job ids, ascending.
func nextIDs(ctx context.Context, tx pgx.Tx, n int) ([]int64, error) {
	rows, err := tx.Query(ctx, "SELECT nextval('runlog_job_id') FROM generate_series(1, $1)", n)
	if err != nil {
		return nil, fmt.Errorf("pgstore: draw job ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgstore: draw job ids: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// breakerRow is a target's breaker as a transaction read it: locked (FOR
// UPDATE) when the transaction may change it, else a plain read of the zero
// breaker, which the transaction's decisions leave unchanged.
type breakerRow struct {
	b, orig retry.Breaker
	locked  bool
}

// loadBreakers reads the breakers of the targets not yet in into and adds
// them. A breaker that is not the zero one, or whose target is in mayFail
// (an outcome of the transaction counts as its failure), is locked FOR
// UPDATE, in target order, since the transaction may change it. A zero
// breaker that nothing here fails stays unlocked: admission and a success
// leave it as it is, so the transaction orders before any concurrent one
// that changes it, and the hot path (every target healthy) takes no lock
// that all nodes would queue on.
//
// nonZero, if not nil, holds every breaker that was not the zero one when
// tx read them all (queueNonZeroBreakers): the targets not in it are read
// as zero breakers without a query.
func (s *Store) loadBreakers(ctx context.Context, tx querier, targets []string, mayFail map[string]bool, into map[string]*breakerRow, nonZero map[string]retry.Breaker) error {
	var need []string
	for _, t := range targets {
		if _, ok := into[t]; !ok {
			need = append(need, t)
		}
	}
	if len(need) == 0 {
		return nil
	}
	slices.Sort(need)
	need = slices.Compact(need)
	read := nonZero
	if read == nil {
		var err error
		read, err = scanBreakers(ctx, tx, "SELECT target, state, fails, until, busy FROM runlog_breakers WHERE target = ANY($1)", need)
		if err != nil {
			return err
		}
	}
	var lock, missing []string
	for _, t := range need {
		b, exists := read[t]
		if b.IsZero() && !mayFail[t] {
			into[t] = &breakerRow{}
			continue
		}
		lock = append(lock, t)
		if !exists {
			missing = append(missing, t)
		}
	}
	if len(lock) == 0 {
		return nil
	}
	if len(missing) > 0 {
		// Committed at once, outside tx, so that the rows exist to be
		// locked and no transaction waits on another's uncommitted insert.
		if _, err := s.pool.Exec(ctx, "INSERT INTO runlog_breakers (target) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", missing); err != nil {
			return fmt.Errorf("pgstore: create breaker rows: %w", err)
		}
	}
	locked, err := scanBreakers(ctx, tx, `SELECT target, state, fails, until, busy FROM runlog_breakers
		WHERE target = ANY($1) ORDER BY target COLLATE "C" FOR UPDATE`, lock)
	if err != nil {
		return err
	}
	for _, t := range lock {
		b, ok := locked[t]
		if !ok {
			return fmt.Errorf("pgstore: the breaker row of target %q vanished while it was being locked; was runlog_breakers changed by hand?", t)
		}
		into[t] = &breakerRow{b: b, orig: b, locked: true}
	}
	return nil
}

// scanBreakers runs a query of breaker rows for the targets.
func scanBreakers(ctx context.Context, tx querier, sql string, targets []string) (map[string]retry.Breaker, error) {
	rows, err := tx.Query(ctx, sql, targets)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read breakers: %w", err)
	}
	return readBreakers(rows)
}

// nonZeroBreakersSQL reads every breaker that is not the zero one.
const nonZeroBreakersSQL = `SELECT target, state, fails, until, busy FROM runlog_breakers
	WHERE NOT (state = 0 AND cardinality(fails) = 0 AND until = 0 AND busy = 0)`

// queueNonZeroBreakers queues, in b, the read of every breaker that is not
// the zero one (as a rule none, or few: only targets in trouble have one)
// into *into.
func queueNonZeroBreakers(b *pgx.Batch, into *map[string]retry.Breaker) {
	b.Queue(nonZeroBreakersSQL).Query(func(rows pgx.Rows) error {
		m, err := readBreakers(rows)
		*into = m
		return err
	})
}

// readBreakers reads breaker rows (target, state, fails, until, busy) and
// closes rows.
func readBreakers(rows pgx.Rows) (map[string]retry.Breaker, error) {
	defer rows.Close()
	out := make(map[string]retry.Breaker)
	for rows.Next() {
		var (
			t     string
			st    int16
			fails []int64
			until int64
			busy  int32
		)
		if err := rows.Scan(&t, &st, &fails, &until, &busy); err != nil {
			return nil, err
		}
		if len(fails) == 0 {
			fails = nil
		}
		out[t] = retry.Breaker{State: retry.BreakerState(st), Fails: fails, Until: until, Busy: int(busy)}
	}
	return out, rows.Err()
}

// queueBreakerWrites queues the writes of the breakers that changed. Only a
// locked breaker may change.
func queueBreakerWrites(b *pgx.Batch, brs map[string]*breakerRow) error {
	for t, br := range brs {
		if sameBreaker(br.b, br.orig) {
			continue
		}
		if !br.locked {
			return fmt.Errorf("pgstore: internal error: the unlocked breaker of target %q changed; nothing was written", t)
		}
		fails := br.b.Fails
		if fails == nil {
			fails = []int64{}
		}
		b.Queue("UPDATE runlog_breakers SET state = $2, fails = $3, until = $4, busy = $5 WHERE target = $1",
			t, int16(br.b.State), fails, br.b.Until, int32(br.b.Busy))
		br.orig = br.b // written: a later write in the same transaction starts from here
	}
	return nil
}

// sameBreaker reports whether a and b are equal.
func sameBreaker(a, b retry.Breaker) bool {
	return a.State == b.State && a.Until == b.Until && a.Busy == b.Busy && slices.Equal(a.Fails, b.Fails)
}

// sendBatch runs the queued statements of b in tx.
func sendBatch(ctx context.Context, tx querier, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// Claim implements store.Store. It selects due pending jobs in (due, id)
// order with FOR UPDATE SKIP LOCKED (jobs another node is claiming are
// skipped), locks their targets' breakers, and starts, defers or fails each
// as the embedded store would, all in one transaction.
func (s *Store) Claim(ctx context.Context, now int64, lim store.Limits) ([]store.Claim, error) {
	if lim.Max <= 0 {
		return nil, nil
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	gen := s.dueGen()
	var res claimResult
	err := s.inPipeTx(ctx, func(tx querier, b *pgx.Batch) (*pgx.Batch, error) {
		// One round trip for BEGIN, every breaker that is not the zero
		// one and the first due rows.
		var (
			nonZero map[string]retry.Breaker
			due     []*jobRow
		)
		queueNonZeroBreakers(b, &nonZero)
		queueDue(b, now, lim.Max, &due)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		res = claimResult{}
		return s.claimTx(ctx, tx, now, lim, nil, nonZero, &due, &res)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	s.claimed(gen, res)
	if res.deferred {
		s.wakeNodes()
	}
	return res.claims, nil
}

// dueGen returns the generation of the cached next due time.
func (s *Store) dueGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.due.gen
}

// claimed records the attempts of a committed claim as in flight (for the
// heartbeat) and updates the cached next due time: when the claim looked at
// every due job (and no invalidation came since gen), it knows the next due
// time without asking the database again.
func (s *Store) claimed(gen uint64, res claimResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range res.claims {
		s.inflight[c.ID] = flight{attempt: c.Attempt, startedAt: res.at, target: c.Target, facts: res.facts[i]}
	}
	if (res.exhausted || res.more) && s.due.gen == gen {
		s.due.valid, s.due.at, s.due.has = true, res.next, res.hasNext
	} else {
		s.due.valid = false
		s.due.gen++
	}
}

// claimResult is what one claim transaction decided.
type claimResult struct {
	claims   []store.Claim
	facts    []state.Facts // of each claim's job once its attempt started
	at       int64         // when the claims' attempts started
	deferred bool          // a job was deferred: wake the nodes once committed
	// more: the claim stopped at its limit before a due row, whose due
	// time is then next: the dispatcher need not ask the database.
	more      bool
	exhausted bool  // every due job not locked by another node was looked at
	next      int64 // then: the next due time (now while jobs are held)
	hasNext   bool
}

// claimTx is Claim inside tx. brs holds the breakers tx has read already
// (nil for none); it gains the ones the claim reads.
//
// nonZero is as for loadBreakers; pre, if not nil, holds the first round's
// due rows, selected already (queueDue) with want = claimWant(lim.Max, 0).
// It decides into *res and returns the last round's writes unsent, for the
// caller to send with its COMMIT (which fills in res's next due time).
func (s *Store) claimTx(ctx context.Context, tx querier, now int64, lim store.Limits, brs map[string]*breakerRow, nonZero map[string]retry.Breaker, pre *[]*jobRow, res *claimResult) (*pgx.Batch, error) {
	if brs == nil {
		brs = make(map[string]*breakerRow)
	}
	var (
		held      = []int64{}
		perTarget map[string]int
		decisions int
		deferred  bool
		c         = s.opts.Circuit
		leaseMS   = s.opts.Lease.Milliseconds()
	)
	res.at = now
	for round := 0; ; round++ {
		want := claimWant(lim.Max-len(res.claims), round)
		var due []*jobRow
		if pre != nil {
			due, pre = *pre, nil
		} else {
			var b pgx.Batch
			queueDueRound(&b, now, held, want, &due)
			if err := sendBatch(ctx, tx, &b); err != nil {
				return nil, err
			}
		}
		targets := make([]string, len(due))
		for i, r := range due {
			targets[i] = r.spec.Target
		}
		if err := s.loadBreakers(ctx, tx, targets, nil, brs, nonZero); err != nil {
			return nil, err
		}
		var (
			b                 pgx.Batch
			stopped           bool
			startIDs, startNs = make([]int64, 0, len(due)), make([]int64, 0, len(due))
			startLatest       = make([]string, 0, len(due))
			buf               = make([]byte, 0, 128)
			left              *jobRow // the first due row the claim stopped before
		)
		for _, r := range due {
			if len(res.claims) == lim.Max || decisions >= maxDecisionsPerClaim {
				stopped, left = true, r
				break
			}
			target := r.spec.Target
			if lim.PerTarget > 0 {
				n := perTarget[target]
				if lim.Running != nil {
					n += lim.Running(target)
				}
				if n >= lim.PerTarget {
					held = append(held, int64(r.id))
					continue
				}
			}
			br := brs[target]
			op := state.AdmitJob(r.facts(), br.b, c, now)
			apply(r, &br.b, c, &op, s.opts.Node)
			switch op.Kind {
			case state.OpStart:
				buf = appendAttempt(buf[:0], r.hist[len(r.hist)-1]) // the attempt apply started
				startIDs = append(startIDs, int64(r.id))
				startNs = append(startNs, int64(op.Attempt))
				startLatest = append(startLatest, string(buf))
				res.claims = append(res.claims, store.Claim{
					ID: r.id, Attempt: op.Attempt, Kind: r.spec.Kind, Target: target,
					Payload: r.spec.Payload, TimeoutMS: r.spec.TimeoutMS,
				})
				res.facts = append(res.facts, r.facts())
				if lim.PerTarget > 0 {
					if perTarget == nil {
						perTarget = make(map[string]int)
					}
					perTarget[target]++
				}
			case state.OpDefer:
				decisions++
				deferred = true
				b.Queue("UPDATE runlog_jobs SET due = $2 WHERE id = $1", int64(r.id), op.Due)
			case state.OpFail:
				decisions++
				b.Queue("UPDATE runlog_jobs SET state = 3, finished_at = $2, reason = $3 WHERE id = $1", int64(r.id), op.At, op.Error)
			}
		}
		if len(startIDs) > 0 {
			// The new attempt becomes latest, written whole; the previous
			// one, if any, moves to the end of history (only a retried
			// job's start edits JSON on the server).
			b.Queue(`UPDATE runlog_jobs j SET state = 1, started = u.n, node = $3,
					lease_until = clock_timestamp() + $4 * interval '1 millisecond', latest = u.latest,
					history = CASE WHEN j.latest IS NULL THEN j.history
						ELSE (CASE WHEN jsonb_array_length(j.history) >= $5 THEN j.history - 0 ELSE j.history END)
							|| jsonb_build_array(j.latest::jsonb) END
				FROM unnest($1::bigint[], $2::bigint[], $6::text[]) AS u(id, n, latest) WHERE j.id = u.id`,
				startIDs, startNs, s.opts.Node, leaseMS, state.MaxAttemptHistory-1, startLatest)
		}
		last := stopped || len(res.claims) == lim.Max || decisions >= maxDecisionsPerClaim
		if !last && len(due) < want {
			res.exhausted, last = true, true
		} else if left != nil && len(held) == 0 {
			// Every pending job due before it was started, deferred or
			// failed here (or is another node's to claim): it is the
			// next due job.
			res.more, res.next, res.hasNext = true, left.due, true
		}
		if last {
			// The last round's writes share their round trip with the
			// claim's end and the COMMIT: the caller sends them.
			return &b, endClaim(&b, now, res, brs, deferred, len(held) > 0)
		}
		if err := sendBatch(ctx, tx, &b); err != nil {
			return nil, err
		}
	}
}

// endClaim queues in b, after the last round's writes, the breaker writes
// and the next due time (when the claim looked at every due job); the
// caller sends b with its COMMIT. A deferral makes the caller wake the
// nodes once committed (res.deferred): the job is due again at a time
// their cached next due time does not know.
func endClaim(b *pgx.Batch, now int64, res *claimResult, brs map[string]*breakerRow, deferred, held bool) error {
	res.deferred = deferred
	if err := queueBreakerWrites(b, brs); err != nil {
		return err
	}
	if res.exhausted && held {
		res.next, res.hasNext = now, true
	} else if res.exhausted {
		b.Queue("SELECT min(due) FROM runlog_jobs WHERE state = 0 AND due > $1", now).QueryRow(func(row pgx.Row) error {
			var next *int64
			if err := row.Scan(&next); err != nil {
				return err
			}
			if next != nil {
				res.next, res.hasNext = *next, true
			}
			return nil
		})
	}
	return nil
}

// dueSQL selects and locks the due pending jobs ($1 now) not in $2 (held
// back), in (due, id) order, at most $3, skipping those another
// transaction holds.
const dueSQL = `SELECT id, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms,
		due, first_due, fails, started, last_error
	FROM runlog_jobs WHERE state = 0 AND due <= $1 AND NOT (id = ANY($2))
	ORDER BY due, id LIMIT $3 FOR UPDATE SKIP LOCKED`

// claimWant is how many due rows round (0 for the first) of a claim
// selects to start up to n attempts: one more than n at least, so that a
// claim that starts n attempts sees the next due row, and so the next due
// time; minClaimRound at least after the first.
func claimWant(n, round int) int {
	if round == 0 {
		return n + 1
	}
	return max(n+1, minClaimRound)
}

// queueDue queues, in b, the first round of a claim for up to max attempts
// at now (dueSQL), its rows into *into.
func queueDue(b *pgx.Batch, now int64, max int, into *[]*jobRow) {
	queueDueRound(b, now, []int64{}, claimWant(max, 0), into)
}

// noSort and sortAgain surround a claim's dueSQL (queueDueRound).
const (
	noSort    = "SET LOCAL enable_sort = off"
	sortAgain = "SET LOCAL enable_sort TO DEFAULT"
)

// queueDueRound queues, in b, dueSQL for want rows at now, not those in
// held, its rows into *into. The planner may not sort: where its
// statistics say that few jobs are due (a table not analyzed yet, or
// analyzed while the queue was short), it would fetch every due row
// through a bitmap scan and sort them all, on every claim (8-20 ms with
// 10-40 k jobs waiting) instead of walking the (due, id) index and
// stopping at the limit. Sorting is allowed again right after: for a
// statement that cannot do without one, enable_sort = off only inflates
// the plan's cost, enough to have it compiled by the JIT (40-150 ms for
// the breakers' ORDER BY target COLLATE "C").
func queueDueRound(b *pgx.Batch, now int64, held []int64, want int, into *[]*jobRow) {
	b.Queue(noSort)
	b.Queue(dueSQL, now, held, want).Query(func(rows pgx.Rows) error {
		var err error
		*into, err = readDue(rows)
		return err
	})
	b.Queue(sortAgain)
}

// readDue reads the rows of dueSQL and closes rows.
func readDue(rows pgx.Rows) ([]*jobRow, error) {
	defer rows.Close()
	var due []*jobRow
	for rows.Next() {
		r := &jobRow{st: state.Pending}
		var id, started int64
		p := &r.spec.Policy
		if err := rows.Scan(&id, &r.spec.Kind, &r.spec.Target, &r.spec.Payload, &p.Attempts, &p.BaseMS, &p.CapMS, &p.DeadlineMS,
			&r.spec.TimeoutMS, &r.due, &r.firstDue, &r.fails, &started, &r.lastError); err != nil {
			return nil, err
		}
		r.id, r.started = uint64(id), uint32(started)
		due = append(due, r)
	}
	return due, rows.Err()
}

// writeRows writes the changed rows (state, due, budget, reason, history)
// and breakers and reports whether a job became pending again (a retry), in
// which case it NOTIFYs the nodes: their next due time may have moved.
func (s *Store) writeRows(ctx context.Context, tx querier, rows []*jobRow, changed map[*jobRow]bool, brs map[string]*breakerRow) (requeued bool, err error) {
	var (
		b                            pgx.Batch
		ids, due, finished           []int64
		states                       []int16
		fails                        []int32
		lastErrs, reasons, histories []string
		latests                      []string
	)
	for _, r := range rows {
		if !changed[r] {
			continue
		}
		hist, latest := splitHistory(r.hist)
		requeued = requeued || r.st == state.Pending
		ids, due, finished = append(ids, int64(r.id)), append(due, r.due), append(finished, r.finishedAt)
		states, fails = append(states, int16(r.st)), append(fails, int32(r.fails))
		lastErrs, reasons, histories = append(lastErrs, r.lastError), append(reasons, r.reason), append(histories, hist)
		latests = append(latests, latest)
	}
	if len(ids) > 0 {
		b.Queue(`UPDATE runlog_jobs j SET state = u.state, due = u.due, finished_at = u.finished, fails = u.fails,
				last_error = u.last_error, reason = u.reason, history = u.history::jsonb, latest = NULLIF(u.latest, ''),
				lease_until = CASE WHEN u.state = 1 THEN j.lease_until END
			FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[])
				AS u(id, state, due, finished, fails, last_error, reason, history, latest)
			WHERE j.id = u.id`, ids, states, due, finished, fails, lastErrs, reasons, histories, latests)
	}
	if err := queueBreakerWrites(&b, brs); err != nil {
		return false, err
	}
	if requeued {
		b.Queue("SELECT pg_notify($1, '')", chanWake)
	}
	return requeued, sendBatch(ctx, tx, &b)
}

// Rescue requeues, as failed attempts (the seed's orphan rule), up to
// maxRequeue running attempts whose lease expired on the database clock,
// whichever node started them, and returns how many. Every node runs it
// every RescueEvery.
func (s *Store) Rescue(ctx context.Context) (int, error) {
	n, err := s.requeue(ctx, "state = 1 AND lease_until < now()", nil, "")
	if n > 0 {
		s.wake()
	}
	return n, err
}

// requeue requeues the running attempts that match where (with args) as
// failed attempts, each with the error "interrupted: <why> during attempt
// N"; an empty why says that the attempt's node stopped renewing its lease.
func (s *Store) requeue(ctx context.Context, where string, args []any, why string) (int, error) {
	var n int
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		rows, err := queryRows(ctx, tx, "SELECT "+jobColsNoPayload+" FROM runlog_jobs WHERE "+where+
			fmt.Sprintf(" ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED", maxRequeue), args...)
		if err != nil {
			return err
		}
		n = len(rows)
		if n == 0 {
			return nil
		}
		targets := make([]string, len(rows))
		mayFail := make(map[string]bool)
		for i, r := range rows {
			targets[i] = r.spec.Target
			mayFail[r.spec.Target] = true // an orphan may free a half-open probe slot
		}
		brs := make(map[string]*breakerRow)
		if err := s.loadBreakers(ctx, tx, targets, mayFail, brs, nil); err != nil {
			return err
		}
		now := s.opts.Now()
		changed := make(map[*jobRow]bool, len(rows))
		for _, r := range rows {
			w := why
			if w == "" {
				w = fmt.Sprintf("node %s stopped renewing its lease", r.node)
			}
			op := state.OrphanJob(r.facts(), now, w)
			apply(r, &brs[r.spec.Target].b, s.opts.Circuit, &op, "")
			changed[r] = true
		}
		_, err = s.writeRows(ctx, tx, rows, changed, brs)
		return err
	})
	if err != nil {
		return 0, err
	}
	if n > 0 {
		s.invalidate()
	}
	return n, nil
}

// Cancel implements store.Store. running is true only when the attempt
// runs on this node (the engine cancels it); an attempt on another node is
// cancelled there, through a runlog_cancel notification.
func (s *Store) Cancel(ctx context.Context, now int64, id uint64, reason string) (bool, error) {
	if err := s.usable(); err != nil {
		return false, err
	}
	var running bool
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		running = false
		var (
			st   int16
			node string
		)
		err := tx.QueryRow(ctx, "SELECT state, node FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)).Scan(&st, &node)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		js := state.JobState(st)
		if js != state.Pending && js != state.Running {
			return store.ErrFinished
		}
		if _, err := tx.Exec(ctx, "UPDATE runlog_jobs SET state = 4, finished_at = $2, reason = $3, lease_until = NULL WHERE id = $1",
			int64(id), now, reason); err != nil {
			return err
		}
		if js == state.Running && node != s.opts.Node {
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", chanCancel, cancelPayload(id, node))
			return err
		}
		running = js == state.Running
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("pgstore: cancel job %d: %w", id, err)
	}
	s.invalidate()
	return running, nil
}

// Revive implements store.Store.
func (s *Store) Revive(ctx context.Context, now int64, id uint64) error {
	if err := s.usable(); err != nil {
		return err
	}
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		var st int16
		err := tx.QueryRow(ctx, "SELECT state FROM runlog_jobs WHERE id = $1 FOR UPDATE", int64(id)).Scan(&st)
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if js := state.JobState(st); js != state.Failed && js != state.Cancelled {
			return store.ErrNotFailed
		}
		if _, err := tx.Exec(ctx, `UPDATE runlog_jobs SET state = 0, due = $2, first_due = $2, fails = 0,
			finished_at = 0, reason = '', last_error = '' WHERE id = $1`, int64(id), now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1, '')", chanWake)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: retry job %d: %w", id, err)
	}
	s.invalidate()
	return nil
}
