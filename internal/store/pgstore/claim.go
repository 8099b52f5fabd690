package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// minClaimRound is the fewest due rows a later round of a claim selects
// (one after a round that deferred or failed jobs), so that a claim for few
// attempts behind many deferrals needs few rounds. The first round selects
// only one row more than it may start: each row selected is locked (a WAL
// record and a dirtied page), and with 16 slots a claim starts about 8.
const minClaimRound = 32

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
	gen := s.claimBegins()
	var (
		res         claimResult
		seenNonZero map[string]retry.Breaker
	)
	err := s.inPipeTx(ctx, func(tx querier, b *pgx.Batch) (*pgx.Batch, error) {
		// One round trip for BEGIN, every breaker that is not the zero
		// one and the first due rows.
		var (
			nonZero map[string]retry.Breaker
			flows   map[string]state.Flow
			due     []*jobRow
			queues  claimQueues
		)
		// While the node's last claim found no queue with a setting
		// (plain), the rows of the bounded and rate-limited queues are
		// not locked in this round trip: one statement less a claim,
		// and a claim that finds such a queue locks them late.
		plain := s.plainQueues()
		queueStartReads(b, startReads{queues: &queues, lockPaced: !plain, breakers: &nonZero, flows: &flows})
		queueDue(b, now, lim.Max, plain, &due)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		pre := &due
		if plain {
			late, err := lockPacedLate(ctx, tx, &queues)
			if err != nil {
				return nil, err
			}
			if late {
				pre = nil
			}
		}
		res, seenNonZero = claimResult{}, nonZero
		return s.newClaim(tx, now, lim, nil, nonZero, queues, flows, &res).run(ctx, pre)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", err)
	}
	s.noteTrouble(seenNonZero)
	s.claimed(gen, res)
	if res.deferred {
		s.wakeNodes()
	}
	if res.held > 0 && lim.Held != nil {
		lim.Held(res.held)
	}
	return res.claims, nil
}

// claimBegins marks the start of a claim (a Claim, or a Finish that
// claims) and returns the generation it compares at its end (claimed).
// The start is itself a change of generation: of two claims of this node
// that overlap, each sees the other's start or end, and neither caches
// its next due time. A claim skips the due rows the other holds locked
// (SKIP LOCKED), which the other may leave pending (held back by a queue
// or a target, or past its limit): had the claim that skipped them
// cached "nothing due", the dispatcher would not look again until the
// next poll, and with the poll off, never.
func (s *Store) claimBegins() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.due.gen++
	return s.due.gen
}

// claimed records the attempts of a committed claim as in flight (for the
// heartbeat) and updates the cached next due time: when the claim looked at
// every due job (and no other claim, invalidation or enqueue came since
// gen), it knows the next due time without asking the database again.
func (s *Store) claimed(gen uint64, res claimResult) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range res.claims {
		s.inflight[c.ID] = flight{startedAt: res.at, target: c.Target, facts: res.facts[i]}
	}
	switch {
	case (res.exhausted || res.more) && s.due.gen == gen:
		s.due.valid, s.due.at, s.due.has = true, res.next, res.hasNext
	case res.more:
		// Another claim overlapped this one, but a due row was left
		// here at the limit: something is due. That answer can only be
		// early (the row may be started by the other claim meanwhile),
		// which costs one claim that finds less; never late, the lost
		// wake-up that claimBegins guards against. Without it, a node
		// with a backlog and two claims in flight (the usual case
		// under load) asked the database for its next due time before
		// every claim (issue 17's PostgreSQL W1 loss).
		s.due.valid, s.due.at, s.due.has = true, res.next, true
		s.due.gen++
	default:
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
	held      int // due jobs the planner held back (Limits.Held)
}

// claimTx is one claim inside a transaction: what it has read and decided
// over its rounds. A round selects due rows (dueSQL), reads their targets'
// breakers, and offers each row to the claim's state.Planner, the rule the
// embedded store follows too; the round's writes go to the database with
// the next round's SELECT, or, for the last round, with the COMMIT.
type claimTx struct {
	s   *Store
	tx  querier
	now int64
	max int // the most attempts the claim starts (Limits.Max)
	// brs holds the breakers the transaction has read (and may write); it
	// gains the ones the claim reads.
	brs map[string]*breakerRow
	// nonZero is as for loadBreakers.
	nonZero map[string]retry.Breaker
	// flows holds every flow that was not the zero one when tx read them
	// (queueStartReads): the rows the claim locks, with those of the
	// targets that have a configured limit.
	flows  map[string]state.Flow
	plan   state.Planner
	held   []string // the targets held back (per-target limit, slow start): not selected again
	queues claimQueues
	// heldQueues are the queues found at their concurrency: their jobs
	// are not selected again.
	heldQueues []string
	deferred   bool // a job was deferred
	res        *claimResult

	// paced are the queues whose pace the claim changed (queueApplied).
	paced []string
}

// newClaim returns the claim at now within lim inside tx, which decides
// into *res. brs holds the breakers tx has read already (nil for none).
func (s *Store) newClaim(tx querier, now int64, lim store.Limits, brs map[string]*breakerRow, nonZero map[string]retry.Breaker, queues claimQueues, flows map[string]state.Flow, res *claimResult) *claimTx {
	if brs == nil {
		brs = make(map[string]*breakerRow)
	}
	res.at = now
	c := &claimTx{
		s: s, tx: tx, now: now, max: lim.Max, brs: brs, nonZero: nonZero, flows: flows, held: []string{}, res: res,
		plan: state.NewPlanner(s.opts.Circuit, now, lim.Max, lim.PerTarget, lim.Running), queues: queues, heldQueues: []string{},
	}
	c.plan.SetQueues(queues)
	s.noteBounded(queues)
	// Always: a flow the claim did not see in its first read may be
	// locked later (a breaker that changed meanwhile, changedSince), or
	// by the outcomes before this claim (Finish). A target whose flow is
	// not locked has the zero flow and its configured limit.
	c.plan.WithFlows(s.flowOf(brs))
	return c
}

// run decides the claim. pre, if not nil, holds the first round's due
// rows, selected already (queueDue) with want = claimWant(max, 0). It
// returns the last round's writes unsent, for the caller to send with its
// COMMIT (which fills in the result's next due time).
func (c *claimTx) run(ctx context.Context, pre *[]*jobRow) (*pgx.Batch, error) {
	if err := countBounded(ctx, c.tx, c.queues); err != nil {
		return nil, err
	}
	for round := 0; ; round++ {
		want := claimWant(c.max-len(c.res.claims), round)
		var due []*jobRow
		if pre != nil {
			due, pre = *pre, nil
		} else {
			var b pgx.Batch
			queueDueRound(&b, c.now, c.held, c.heldQueues, len(c.queues) == 0 && len(c.heldQueues) == 0, want, &due)
			if err := sendBatch(ctx, c.tx, &b); err != nil {
				return nil, err
			}
		}
		targets := make([]string, len(due))
		for i, r := range due {
			targets[i] = r.spec.Target
		}
		if err := c.s.loadBreakers(ctx, c.tx, targets, nil, c.brs, c.nonZero); err != nil {
			return nil, err
		}
		if err := c.s.loadFlows(ctx, c.tx, c.s.flowsNeeded(targets, c.flows, changedSince(c.brs, c.nonZero)), c.brs); err != nil {
			return nil, err
		}
		b, left := c.decide(due)
		last := left != nil || c.plan.Done()
		if !last && len(due) < want {
			c.res.exhausted, last = true, true
		} else if left != nil && len(c.held) == 0 && len(c.heldQueues) == 0 {
			// Every pending job due before it was started, deferred or
			// failed here (or is another node's to claim): it is the
			// next due job.
			c.res.more, c.res.next, c.res.hasNext = true, left.Due, true
		}
		if last {
			// The last round's writes share their round trip with the
			// claim's end and the COMMIT: the caller sends them.
			c.res.held = c.plan.Held()
			c.queuePaceWrites(b)
			return b, endClaim(b, c.now, c.res, c.brs, c.deferred, len(c.held)+len(c.heldQueues) > 0)
		}
		if err := sendBatch(ctx, c.tx, b); err != nil {
			return nil, err
		}
	}
}

// decide offers the round's due rows to the planner, applies its ops to
// the rows and breakers (state.Step) and queues their writes; left is the
// first row the claim stopped before (nil if it took every row).
func (c *claimTx) decide(due []*jobRow) (b *pgx.Batch, left *jobRow) {
	b = &pgx.Batch{}
	var (
		circuit, node     = c.s.opts.Circuit, c.s.opts.Node
		startIDs, startNs = make([]int64, 0, len(due)), make([]int64, 0, len(due))
		startLatest       = make([]string, 0, len(due))
		buf               = make([]byte, 0, 128)
	)
	for _, r := range due {
		target := r.spec.Target
		br := c.brs[target]
		op, v := c.plan.Plan(r.facts(), target, br.b)
		if v == state.Stopped {
			left = r
			break
		}
		if v == state.Held {
			// The whole target is held for the rest of the claim
			// (state.Held): its rows are not selected again. Not the
			// job alone: a backlog of one target held back (a slow
			// start) would be selected round after round, each round
			// walking past every row held before.
			if !slices.Contains(c.held, target) {
				c.held = append(c.held, target)
			}
			continue
		}
		if v == state.QueueHeld {
			if !slices.Contains(c.heldQueues, r.spec.Queue) {
				c.heldQueues = append(c.heldQueues, r.spec.Queue)
			}
			continue
		}
		before := br.b
		r.step(&br.b, circuit, &op, node)
		c.s.feedFlow(target, br, before, &op)
		switch op.Kind {
		case state.OpStart:
			buf = appendAttempt(buf[:0], stored(r.Attempts()[len(r.Attempts())-1], node)) // the attempt Step started
			startIDs = append(startIDs, int64(r.ID))
			startNs = append(startNs, int64(op.Attempt))
			startLatest = append(startLatest, string(buf))
			c.res.claims = append(c.res.claims, store.Claim{
				ID: r.ID, Attempt: op.Attempt, Kind: r.spec.Kind, Target: target,
				Payload: r.spec.Payload, TimeoutMS: r.spec.TimeoutMS, Metadata: r.spec.Metadata,
			})
			c.res.facts = append(c.res.facts, r.facts())
			c.queueApplied(r.spec.Queue, &op)
		case state.OpDefer:
			c.deferred = true
			c.queueApplied(r.spec.Queue, &op)
			b.Queue(deferSQL, int64(r.ID), op.Due)
		case state.OpFail:
			b.Queue(failSQL, int64(r.ID), op.At, op.Error)
		}
	}
	if len(startIDs) > 0 {
		// The new attempt becomes latest, written whole; the previous
		// one, if any, moves to the end of history (only a retried
		// job's start edits JSON on the server).
		b.Queue(startSQL, startIDs, startNs, node, c.s.opts.Lease.Milliseconds(), state.MaxAttemptHistory-1, startLatest)
	}
	return b, left
}

// deferSQL defers job $1 to $2; failSQL fails it at $2 for reason $3 (a
// claim's decisions for a job it does not start).
const (
	deferSQL = "UPDATE runlog_jobs SET due = $2 WHERE id = $1"
	failSQL  = "UPDATE runlog_jobs SET state = " + failedCode + ", finished_at = $2, reason = $3 WHERE id = $1"
)

// startSQL starts the attempts of a claim: $1 the jobs, $2 each one's
// attempt number, $6 each one's attempt as the latest (written whole), $3
// the node, $4 the lease in ms, $5 the history's bound less one.
const startSQL = `UPDATE runlog_jobs j SET state = ` + runningCode + `, started = u.n, node = $3,
		lease_until = clock_timestamp() + $4 * interval '1 millisecond', latest = u.latest,
		history = CASE WHEN j.latest IS NULL THEN j.history
			ELSE (CASE WHEN jsonb_array_length(j.history) >= $5 THEN j.history - 0 ELSE j.history END)
				|| jsonb_build_array(j.latest::jsonb) END
	FROM unnest($1::bigint[], $2::bigint[], $6::text[]) AS u(id, n, latest) WHERE j.id = u.id`

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
		b.Queue(nextDueSQL, now).QueryRow(func(row pgx.Row) error {
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

// liveQueues is a WITH RECURSIVE list (live) of the queues that have
// pending jobs, less those in the array held and the paused ones: a skip
// scan of runlog_jobs_queue_due, one index probe per queue, so that a held
// queue costs one probe however many jobs it holds. Before, the claim
// walked the due index past every due job of a paused queue, of a queue at
// its concurrency and of a rate-limited one (300 000 jobs in a paused
// queue: 279 ms a claim).
//
// Pending is written pendingBelow ("state < 1") so that the planner proves
// it only for the indexes of version 13, never for runlog_jobs_due or
// runlog_jobs_priority (their predicate is state = 0): with those, a
// generic plan of the per-queue probe walked the whole due index with the
// queue as a filter.
func liveQueues(held string) string {
	return `WITH RECURSIVE qs(q) AS (
		(SELECT queue FROM runlog_jobs WHERE ` + pendingBelow + ` ORDER BY queue LIMIT 1)
		UNION ALL
		SELECT (SELECT queue FROM runlog_jobs WHERE ` + pendingBelow + ` AND queue > qs.q ORDER BY queue LIMIT 1) FROM qs WHERE qs.q IS NOT NULL),
	live AS (SELECT q FROM qs WHERE q IS NOT NULL AND NOT (q = ANY(` + held + `)))`
}

// dueSQL selects and locks the due pending jobs ($1 now) not of a target
// in $2 (held back) nor of a queue in $4 (held back) or paused, the first
// $3 in claim order (higher priority first, then (due, id)) of each live
// queue's two ranges (priority 0, and the others), skipping those another
// transaction holds: up to 2 × $3 rows a queue, which readDue puts in
// claim order and cuts to $3. Each probe is one index range: priority 0
// from runlog_jobs_queue_due, the others from runlog_jobs_queue_priority,
// which holds them alone (in claim order: the first $3 of the jobs above
// 0 and below it hold every one of them that the claim's first $3 may
// hold); a range without jobs costs an empty probe.
var dueSQL = liveQueues(`$4::text[] || `+pausedQueues) + `
	SELECT j.* FROM live CROSS JOIN LATERAL (SELECT ` + dueCols + ` FROM runlog_jobs
		WHERE ` + pendingBelow + ` AND queue = live.q AND priority <> 0 AND ` + dueWhere + `
		ORDER BY priority DESC, due, id LIMIT $3 FOR UPDATE SKIP LOCKED) j
	UNION ALL
	SELECT j.* FROM live CROSS JOIN LATERAL (SELECT ` + dueCols + ` FROM runlog_jobs
		WHERE ` + pendingBelow + ` AND queue = live.q AND priority = 0 AND ` + dueWhere + `
		ORDER BY due, id LIMIT $3 FOR UPDATE SKIP LOCKED) j`

// plainDueSQL is dueSQL for a claim that knows of no queue with a
// setting: the due pending jobs in claim order across the queues, the
// first $3 of those of priority 0 by a walk of runlog_jobs_due ((due, id)
// of the pending jobs) and the first $3 of the others by a walk of
// runlog_jobs_priority, as claims did before version 13. Without the skip
// scan of the queues, which walks the index's prefix of jobs started
// since the last vacuum once more, a claim reads fewer buffers and is
// cheaper to plan (W1 at 16 slots, pg_stat_statements: 57.5 buffers a
// call and 0.88 ms a plan, against dueSQL's 95.5 and 2.66 ms; a pooled
// connection plans a statement at each of its first five executions).
// It leaves out the paused queues' jobs and those of the queues in $4 as
// dueSQL does, but walks past them: a claim that finds a queue with a
// setting (read in its first round trip, before its first due rows come
// back) selects its later rounds by dueSQL, and so does the node's next
// claim. A queue paused since the node's last claim costs the first round
// of one claim a walk, no more; the claim's planner holds the jobs of a
// paused queue or one at its concurrency either way (state.QueueHeld).
var plainDueSQL = `SELECT j.* FROM (SELECT ` + dueCols + ` FROM runlog_jobs
		WHERE state = ` + pendingCode + ` AND priority <> 0 AND ` + dueWhere + ` AND queue NOT IN (SELECT unnest($4::text[]) UNION ALL ` + pausedQueueSet + `)
		ORDER BY priority DESC, due, id LIMIT $3 FOR UPDATE SKIP LOCKED) j
	UNION ALL
	SELECT j.* FROM (SELECT ` + dueCols + ` FROM runlog_jobs
		WHERE state = ` + pendingCode + ` AND priority = 0 AND ` + dueWhere + ` AND queue NOT IN (SELECT unnest($4::text[]) UNION ALL ` + pausedQueueSet + `)
		ORDER BY due, id LIMIT $3 FOR UPDATE SKIP LOCKED) j`

// plainQueues reports whether the node's last claim found no queue with
// a setting (noteBounded): its next claim's first round then selects by
// plainDueSQL.
func (s *Store) plainQueues() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plain
}

// dueCols are the columns of a due row (readDue).
const dueCols = `id, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms,
		due, first_due, fails, started, last_error, queue, priority, metadata`

// dueWhere selects the due jobs of a queue's probe in dueSQL: jobs of
// disabled targets and of the targets held back ($2) are filtered, not
// skipped by the index (see docs/postgres.md, "Claims").
//
// The filters are NOT IN a subquery, not NOT (target = ANY(array)): when
// most pending jobs share a target (one webhook endpoint, a benchmark's
// one kind), the planner took "target <> ALL(an array it cannot see)" for
// nearly no row (the array might hold that target), and a generic plan,
// or a custom one for a subquery's array, read every due row and sorted
// them for a page of $3 (a bitmap scan and a sort spilled to disk: 45-55
// ms a claim with 40 000 due jobs, against 0.3 ms for the walk of the due
// index). A hashed subplan's NOT IN keeps the planner's default guess, and
// the walk. The same for a queue's filter (plainDueSQL) and the next due
// time (nextDueSQL).
//
// The held and the disabled targets are one subquery (UNION ALL), and so
// are a plain claim's held and paused queues: each hashed subplan is
// built at every execution, and four of them to a branch cost a plain
// claim of 17 rows 20 % of its time (pgbench of the statement alone, one
// client: 1 470-1 730 claims/s with four a branch, 1 800-1 940 with two,
// 1 830 for 92d351b's, which had none).
const dueWhere = `due <= $1 AND target NOT IN (SELECT unnest($2::text[]) UNION ALL ` + disabledTargetSet + `)`

// nextDueSQL is the next due time of a job that may start: the earliest
// due pending job of a queue that is not paused, not of a disabled target,
// due after $1 (math.MinInt64 for any, as NextDue asks): one probe of runlog_jobs_queue_due per queue.
var nextDueSQL = liveQueues(pausedQueues) + `
	SELECT min(d.due) FROM live CROSS JOIN LATERAL (SELECT due FROM runlog_jobs
		WHERE ` + pendingBelow + ` AND queue = live.q AND due > $1 AND target NOT IN (` + disabledTargetSet + `)
		ORDER BY due LIMIT 1) d`

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
// at now (by plainDueSQL if plain, else dueSQL), its rows into *into.
func queueDue(b *pgx.Batch, now int64, max int, plain bool, into *[]*jobRow) {
	queueDueRound(b, now, []string{}, []string{}, plain, claimWant(max, 0), into)
}

// claimPlans sets, for the rest of a claim's transaction, how the planner
// plans what it runs. It is columns of the statement that starts every
// claim's transaction (the shared queueLock, queueLockSharedSQL), not
// statements of their own (SET LOCAL), which cost each claim a statement
// apiece. Every statement of a claim's transaction reads or writes a few
// rows by key (due rows from the head of a due index, jobs and breakers by
// id or target), and is planned so:
//
//   - No sort. Where the planner's statistics say that few jobs are due (a
//     table not analyzed yet, or analyzed while the queue was short), it
//     would fetch every due row through a bitmap scan and sort them all,
//     on every claim (8-20 ms with 10-40 k jobs waiting) instead of walking
//     the (due, id) index and stopping at the limit (W1 at 16 slots without
//     it: 0.37× as fast). What cannot do without a sort (the breakers' and
//     flows' locks in target order) still sorts: the setting only inflates
//     that plan's cost, and the pool's connections compile nothing (jit
//     off, Open), where an inflated cost once had the JIT compile for
//     40-150 ms.
//   - No sequential scan, hash join or merge join: rows are found through
//     indexes and joined by nested loops, whose cost follows the rows a
//     statement touches, not the table's size, whatever the statistics.
//   - Generic plans from the first execution. A prepared statement is
//     otherwise planned again at each of its first five executions on a
//     connection (a custom plan), and the claim's statements cost more to
//     plan than to run (0.35-1.5 ms for dueSQL and nextDueSQL: two
//     branches, their filters' subqueries, ten indexes to weigh): a short
//     burst of work on fresh pooled connections paid for planning more
//     than for its rows. A generic plan is kept for the connection's life
//     and made once, on the statistics of that moment, which is why the
//     settings above come with it: without them, the start's UPDATE
//     planned while runlog_jobs held 660 rows was a hash join over a
//     sequential scan, kept as the table grew (W2 at 0.69× of the code
//     before, each start 7-12 ms). TestClaimTxPlans checks every statement
//     of the claim's path under these settings on a table analyzed small
//     and grown since.
//
// Measured against the same code without the last two (benchrun, 5 000
// jobs, builds in turn): W1 at 256 slots 0.99× in rate and 0.89× in
// machine CPU a job (12 rounds), W1 at 16 slots 1.01× and 0.97× (8), W2
// 1.10× and 0.90× (4), W3 1.58× and 0.63× (5).
const claimPlans = "set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), " +
	"set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), " +
	"set_config('plan_cache_mode', 'force_generic_plan', true)"

// queueDueRound queues, in b, dueSQL (plainDueSQL if plain) for want rows
// at now, not those of the targets in held nor of the queues in
// heldQueues, its rows into *into, as the transaction plans (claimPlans).
func queueDueRound(b *pgx.Batch, now int64, held []string, heldQueues []string, plain bool, want int, into *[]*jobRow) {
	sql := dueSQL
	if plain {
		sql = plainDueSQL
	}
	b.Queue(sql, now, held, want, heldQueues).Query(func(rows pgx.Rows) error {
		var err error
		*into, err = readDue(rows, want)
		return err
	})
}

// readDue reads the rows of dueSQL and closes rows: the first want in
// claim order.
func readDue(rows pgx.Rows, want int) ([]*jobRow, error) {
	defer rows.Close()
	var (
		due                 []*jobRow
		kind, target, queue pgtype.DriverBytes
		names               = make(map[string]string)
	)
	// The kinds, targets and queues of a claim's rows repeat: each is
	// read without a copy and made a string once per claim, not once
	// a row.
	intern := func(b []byte) string {
		if s, ok := names[string(b)]; ok {
			return s
		}
		s := string(b)
		names[s] = s
		return s
	}
	for rows.Next() {
		r := newRow() // State is Pending
		var id, started int64
		var meta []byte
		p := &r.spec.Policy
		if err := rows.Scan(&id, &kind, &target, &r.spec.Payload, &p.Attempts, &p.BaseMS, &p.CapMS, &p.DeadlineMS,
			&r.spec.TimeoutMS, &r.Due, &r.run.FirstDue, &r.run.Fails, &started, &r.run.LastError, &queue, &r.spec.Priority, &meta); err != nil {
			return nil, err
		}
		r.spec.Kind, r.spec.Target, r.spec.Queue = intern(kind), intern(target), intern(queue)
		var err error
		if r.spec.Metadata, err = readMetadata(meta); err != nil {
			return nil, fmt.Errorf("pgstore: job %d: %w", id, err)
		}
		r.ID, r.run.Started = uint64(id), uint32(started)
		due = append(due, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(due, func(a, b *jobRow) int {
		if state.ClaimOrder(&a.Job, &b.Job) {
			return -1
		}
		return 1
	})
	return due[:min(len(due), want)], nil
}
