package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// Finish implements store.Store: in one transaction it records the outcomes
// and then claims up to lim.Max due jobs as Claim does, for the slots the
// finished attempts held. An outcome is recorded only if its attempt is
// still open and was started by this node (fencing): an attempt that was
// rescued after this node missed its lease has ended already, and its late
// outcome is logged and dropped. Each outcome's Verdict says what was
// recorded, from the decisions made here: the engine reads back only the
// jobs of the outcomes without one (fenced off).
func (s *Store) Finish(ctx context.Context, now int64, rnd func() uint32, outs []store.Outcome, lim store.Limits) ([]store.Claim, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	// One draw per outcome, in order, as the embedded store does; drawn
	// once, so that a transaction that runs again decides the same.
	rs := make([]uint32, len(outs))
	for i := range outs {
		rs[i] = rnd()
	}
	// The facts each outcome is decided on, if its attempt was claimed by
	// this node (see flight); nil for the others.
	fls := make([]*flight, len(outs))
	s.mu.Lock()
	for i, o := range outs {
		if f, ok := s.inflight[o.ID]; ok && f.attempt() == o.Attempt {
			fls[i] = &f
		}
	}
	s.mu.Unlock()
	var gen uint64
	if lim.Max > 0 {
		gen = s.claimBegins()
	}
	var (
		fenced       []store.Outcome
		requeued     bool
		fast         *fastSettle
		slowRecorded bool
		res          claimResult
		seenNonZero  map[string]retry.Breaker
		disabled     []state.Op // the targets the outcomes disabled (lifecycle.go)
		fastLives    map[string]state.TargetLife
		verdicts     []store.Verdict // of each outcome
	)
	err := s.inPipeTx(ctx, func(tx querier, b *pgx.Batch) (*pgx.Batch, error) {
		brs := make(map[string]*breakerRow)
		verdicts = make([]store.Verdict, len(outs))
		res = claimResult{}
		// One round trip: BEGIN, the outcomes that have a flight, every
		// breaker that is not the zero one, and the claim's first due
		// rows (which see this transaction's retries, queued before them).
		var (
			nonZero map[string]retry.Breaker
			flows   map[string]state.Flow
			due     []*jobRow
		)
		// The queues first: the shared queueLock is taken before any row
		// lock, so that a queue change waiting for it cannot deadlock
		// with this transaction's rows.
		var (
			queues claimQueues
			lives  map[string]state.TargetLife
		)
		reads := startReads{lockPaced: true, lives: &lives, breakers: &nonZero, flows: &flows}
		if lim.Max > 0 {
			reads.queues = &queues
		}
		queueStartReads(b, reads)
		var err error
		fast, err = s.queueSettleFast(b, now, rs, outs, fls)
		if err != nil {
			return nil, err
		}
		// The breakers this batch will change, locked in the same round
		// trip: the targets of its failures, and those that were in
		// trouble (not the zero breaker) at the last read. A guess that
		// misses one costs loadBreakers a round trip, no more.
		queueLockBreakers(b, s.breakersToLock(fast, fls), brs)
		if lim.Max > 0 {
			queueDue(b, now, lim.Max, s.plainQueues(), &due)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		fast.lives = lives
		fenced, requeued, slowRecorded, err = s.settleTx(ctx, tx, now, rs, outs, fls, fast, brs, nonZero, flows, verdicts)
		seenNonZero, disabled, fastLives = nonZero, fast.disabled, fast.lives
		if err != nil {
			return nil, err
		}
		if lim.Max <= 0 {
			// The breakers the outcomes changed go with the COMMIT (a
			// claim's end queues them with its own).
			last := &pgx.Batch{}
			return last, queueBreakerWrites(last, brs)
		}
		pre := &due
		if slowRecorded || len(disabled) > 0 {
			// An outcome recorded after the due rows were read may have
			// made its job due, or disabled its target (whose due jobs
			// are then held): read them again.
			pre = nil
		}
		return s.newClaim(tx, now, lim, brs, nonZero, queues, flows, &res).run(ctx, pre)
	})
	s.mu.Lock()
	for _, o := range outs {
		// Only the flight of the attempt that ended: a late outcome of an
		// earlier attempt (its job cancelled, retried and started again
		// here) leaves the running attempt's, whose lease the heartbeat
		// renews.
		if f, ok := s.inflight[o.ID]; ok && f.attempt() == o.Attempt {
			delete(s.inflight, o.ID)
		}
	}
	s.mu.Unlock()
	if err != nil {
		s.invalidate()
		return nil, fmt.Errorf("pgstore: finish: %w", err)
	}
	for i, v := range verdicts {
		outs[i].Verdict = v
	}
	s.noteTrouble(seenNonZero)
	s.noteDisabled(fastLives, disabled)
	s.notifyDisabled(disabled)
	switch {
	case lim.Max > 0:
		s.claimed(gen, res)
	case requeued || len(disabled) > 0:
		// A retry is pending again, or a target was disabled (its due
		// jobs are held from now on, so they no longer count). Successes
		// and deaths alone leave the pending jobs, and so the next due
		// time, as they were.
		s.invalidate()
	}
	bounded := s.endedBounded(fls)
	if bounded {
		// A due job of the queue held back here, by this node's claims
		// while these attempts were still recorded as running, may start
		// now: no attempt's end will say so (the slots were freed when
		// the handlers returned).
		s.wake()
	}
	if requeued && !retriesKnown(res, fast, slowRecorded) || res.deferred || bounded {
		// Other nodes' cached next due time does not know the retries'
		// and deferrals' due times.
		s.wakeNodes()
	}
	for _, o := range fenced {
		s.log.Warn("pgstore: outcome dropped: the attempt is no longer this node's (its lease expired and it was requeued, or the job is gone)",
			"job", o.ID, "attempt", o.Attempt, "class", o.Class.String(), "node", s.opts.Node)
	}
	return res.claims, nil
}

// retriesKnown reports whether the other nodes know already, without a
// NOTIFY, of the jobs that an outcome batch made pending again: all of
// them were recorded by the one UPDATE (fast; a retry decided on its row
// NOTIFYs in the transaction, see writeRows), and the batch's claim
// stopped at its limit before a pending job due earlier than any of them
// (res.more, res.next), which was pending before the batch and so was
// announced when it became so. A node that knows a job is due by then
// claims when it has a free slot, and its claim reads the due jobs in
// order, these among them; a node without one does not need to know.
// Under a backlog (W3: every job fails twice, and 500 wait) this spares
// a transaction per outcome batch: the notifier's, with its round trip,
// its xid and the lock that serializes notifying commits.
func retriesKnown(res claimResult, fast *fastSettle, slowRecorded bool) bool {
	return !slowRecorded && res.more && fast.requeued && res.next < fast.earliest
}

// breakersToLock returns the targets whose breakers an outcome batch
// locks in its first round trip: those of the outcomes the one UPDATE
// records that fail their breaker (retryable and unsafe failures), and
// those of any outcome whose breaker was not the zero one at the node's
// last read of them (a success there may close or change it).
func (s *Store) breakersToLock(fast *fastSettle, fls []*flight) []string {
	var ts []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, i := range fast.idx {
		t := fls[i].target
		if fast.ops[n].BreakerFailed || s.trouble[t] {
			ts = append(ts, t)
		}
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// noteTrouble records the targets whose breakers a transaction read as
// not the zero one (nil: it did not read them), for breakersToLock.
func (s *Store) noteTrouble(nonZero map[string]retry.Breaker) {
	if nonZero == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.trouble)
	for t := range nonZero {
		s.trouble[t] = true
	}
}

// settleTx records outcomes in tx (rs holds one random draw per outcome,
// fls the flight of each outcome's attempt where this node claimed it) and
// returns the fenced-off ones and whether a job became pending again; it
// sets verdicts[i] (len(outs) of them, zero on entry) of each outcome it
// records. The breakers it reads (and writes) are added to brs.
//
// An outcome with a flight is decided on the flight's facts and recorded
// by one UPDATE for all of them that requires each row to still be this
// node's running attempt (state running, started = the attempt, node =
// this node): no row is read first. The others, and those whose row was no
// longer in that state (cancelled while it ran, or rescued), are decided
// on their rows, read FOR UPDATE, as before. The breakers then take the
// recorded outcomes in the batch's order, as the embedded store applies
// them.
func (s *Store) settleTx(ctx context.Context, tx querier, now int64, rs []uint32, outs []store.Outcome, fls []*flight, fast *fastSettle, brs map[string]*breakerRow, nonZero map[string]retry.Breaker, flows map[string]state.Flow, verdicts []store.Verdict) (fenced []store.Outcome, requeued, slowRecorded bool, err error) {
	if len(outs) == 0 {
		return nil, false, false, nil
	}
	c := s.opts.Circuit
	// What each outcome was decided to be, and its target, once recorded.
	ops := make([]*state.Op, len(outs))
	targets := make([]string, len(outs))
	requeued = fast.results(outs, ops, targets, fls, verdicts)
	var slow []int // indexes of the outcomes not recorded yet
	for i := range outs {
		if ops[i] == nil {
			slow = append(slow, i)
		}
	}
	var rows []*jobRow
	changed := make(map[*jobRow]bool)
	if len(slow) > 0 {
		ids := make([]int64, len(slow))
		for n, i := range slow {
			ids[n] = int64(outs[i].ID)
		}
		rows, err = queryRows(ctx, tx, settleRowsSQL, ids)
		if err != nil {
			return nil, false, false, err
		}
		byID := make(map[uint64]*jobRow, len(rows))
		for _, r := range rows {
			byID[r.ID] = r
		}
		for _, i := range slow {
			o := outs[i]
			r := byID[o.ID]
			if r == nil || !r.AttemptOpen(o.Attempt) || r.nodeOf(o.Attempt) != s.opts.Node {
				fenced = append(fenced, o)
				continue
			}
			op := settle(r.facts(), o, now, rs[i])
			if r.step(nil, c, &op, "").Fed {
				ops[i], targets[i] = &op, r.spec.Target
				verdicts[i] = store.VerdictOf(&r.Job, o.Attempt)
			}
			changed[r] = true
			slowRecorded = true
		}
	}
	// The breakers, in the batch's order: only those of recorded outcomes.
	mayFail := make(map[string]bool)
	var ts []string
	for i, op := range ops {
		if op != nil {
			ts = append(ts, targets[i])
			if op.BreakerFailed || op.Class == 0 {
				mayFail[targets[i]] = true
			}
		}
	}
	if err := s.loadBreakers(ctx, tx, ts, mayFail, brs, nonZero); err != nil {
		return nil, false, false, err
	}
	// The flows these outcomes change: those kept, those of a configured
	// limit, those a hold or a closing breaker (half-open now) begins.
	holds := make(map[string]bool)
	for i, op := range ops {
		if op != nil && op.HoldUntil != 0 {
			holds[targets[i]] = true
		}
	}
	moved := changedSince(brs, nonZero)
	need := s.flowsNeeded(ts, flows, func(t string) bool { return holds[t] && t != "" || brs[t].b.State == retry.HalfOpen || moved(t) })
	if err := s.loadFlows(ctx, tx, need, brs); err != nil {
		return nil, false, false, err
	}
	for i, op := range ops {
		if op != nil {
			br := brs[targets[i]]
			before := br.b
			br.b = state.BreakerAfter(br.b, c, op)
			s.feedFlow(targets[i], br, before, op)
		}
	}
	if fast.disabled, err = s.settleLife(ctx, tx, ops, targets, outs, fast.lives); err != nil {
		return nil, false, false, err
	}
	if len(changed) == 0 {
		// Only the one UPDATE's outcomes: the breakers they changed are
		// written with the transaction's last batch (the caller's).
		return fenced, requeued, false, nil
	}
	slowRequeued, err := s.writeRows(ctx, tx, rows, changed, brs)
	return fenced, requeued || slowRequeued, slowRecorded, err
}

// fastSettle is the UPDATE of the outcomes that have a flight, queued in a
// batch (queueSettleFast), and what it recorded once the batch ran.
type fastSettle struct {
	idx   []int       // the outcomes it holds
	ops   []*state.Op // their decisions
	retry []bool      // whether each makes its job pending again
	// requeued: a job the UPDATE recorded is pending again, the earliest
	// due at earliest (results).
	requeued bool
	earliest int64
	verdicts []store.Verdict // each one's, once recorded
	recorded map[int64]bool
	// lives are the lifecycle rows read in the first round trip, and
	// disabled the disables settleTx wrote (lifecycle.go).
	lives    map[string]state.TargetLife
	disabled []state.Op
}

// queueSettleFast decides, on their flights' facts, the outcomes that have
// a flight (the first outcome of each attempt) and queues in b one UPDATE
// that records them where the row is still this node's running attempt.
func (s *Store) queueSettleFast(b *pgx.Batch, now int64, rs []uint32, outs []store.Outcome, fls []*flight) (*fastSettle, error) {
	n := len(outs)
	var (
		f                      = &fastSettle{recorded: make(map[int64]bool, n), idx: make([]int, 0, n), ops: make([]*state.Op, 0, n), retry: make([]bool, 0, n)}
		ids, ns, due, finished = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		states                 = make([]int16, 0, n)
		fails                  = make([]int32, 0, n)
		lastErrs, reasons      = make([]string, 0, n), make([]string, 0, n)
		latests                = make([]string, 0, n)
		seen                   = make(map[uint64]bool, n)
		buf                    = make([]byte, 0, 128)
	)
	for i, o := range outs {
		fl := fls[i]
		if fl == nil || seen[o.ID] {
			continue // a second outcome of one job is decided on the row
		}
		seen[o.ID] = true
		// The job as the flight knows it: running this attempt, which is
		// the latest in its history. state.Step gives the row's new columns
		// and the attempt's end.
		r := state.Job{
			ID: o.ID, State: state.Running, Due: fl.facts.Due,
			Run: &state.Run{FirstDue: fl.facts.FirstDue, Started: o.Attempt, Fails: fl.facts.Fails, LastError: fl.facts.LastError, Attempts: []state.Attempt{{N: o.Attempt, StartedAt: fl.startedAt}}},
		}
		op := settle(fl.facts, o, now, rs[i])
		state.Step(&r, nil, s.opts.Circuit, &op)
		buf = appendAttempt(buf[:0], stored(r.Attempts()[0], s.opts.Node))
		f.idx, f.ops, f.retry = append(f.idx, i), append(f.ops, &op), append(f.retry, r.State == state.Pending)
		f.verdicts = append(f.verdicts, store.VerdictOf(&r, o.Attempt))
		ids, ns = append(ids, int64(o.ID)), append(ns, int64(o.Attempt))
		due, finished = append(due, r.Due), append(finished, r.FinishedAt())
		states, fails = append(states, int16(r.State)), append(fails, int32(r.Fails()))
		lastErrs, reasons, latests = append(lastErrs, r.LastError()), append(reasons, r.Reason()), append(latests, string(buf))
	}
	if len(ids) == 0 {
		return f, nil
	}
	running := make([]int16, len(ids))
	for i := range running {
		running[i] = int16(state.Running)
	}
	// The running state is compared with a column of u (all 1), not with a
	// constant, so that the rows are found by id, one index lookup per
	// outcome. With "j.state = 1" the planner, which expects few running
	// jobs, took every running job from the index of active jobs and
	// joined each with every outcome, running the unnest again for each (a
	// generic plan, once the statement was prepared): 65 ms for 256
	// outcomes instead of about 3.
	b.Queue(settleFastSQL, ids, ns, states, due, finished, fails, lastErrs, reasons, latests, s.opts.Node, running).Query(func(rows pgx.Rows) error {
		done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		for _, id := range done {
			f.recorded[id] = true
		}
		return err
	})
	return f, nil
}

// settleRowsSQL reads and locks the rows of the jobs $1 whose outcomes are
// decided on their rows, in id order.
var settleRowsSQL = "SELECT " + jobColsNoPayload + " FROM runlog_jobs WHERE id = ANY($1) ORDER BY id FOR UPDATE"

// settleFastSQL records outcomes decided on their flights ($1 the jobs, $2
// each one's attempt, $3 to $9 the new columns, $11 the running state for
// each) where the row is still this node ($10) running that attempt, and
// answers the jobs it recorded.
const settleFastSQL = `UPDATE runlog_jobs j SET state = u.state, due = u.due, finished_at = u.finished, fails = u.fails,
		last_error = u.last_error, reason = u.reason, lease_until = NULL, latest = u.latest
	FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::bigint[], $5::bigint[], $6::int[], $7::text[], $8::text[], $9::text[], $11::smallint[])
		AS u(id, n, state, due, finished, fails, last_error, reason, latest, running)
	WHERE j.id = u.id AND j.state = u.running AND j.started = u.n AND j.node = $10
	RETURNING j.id`

// results sets ops[i], targets[i] (from fls) and verdicts[i] of each
// outcome the UPDATE recorded, and reports whether one of them made its
// job pending again.
func (f *fastSettle) results(outs []store.Outcome, ops []*state.Op, targets []string, fls []*flight, verdicts []store.Verdict) (requeued bool) {
	for n, i := range f.idx {
		if f.recorded[int64(outs[i].ID)] {
			ops[i], targets[i], verdicts[i] = f.ops[n], fls[i].target, f.verdicts[n]
			if f.retry[n] && (!f.requeued || f.ops[n].Due < f.earliest) {
				f.requeued, f.earliest = true, f.ops[n].Due
			}
		}
	}
	return f.requeued
}

// settle decides the op of outcome o of job f at now: a snooze, or what
// state.SettleJob decides.
func settle(f state.Facts, o store.Outcome, now int64, r uint32) state.Op {
	if o.Snooze {
		return state.SnoozeJob(o.ID, o.Attempt, o.AfterMS, now)
	}
	return state.SettleJob(f, o.Attempt, o.Class, o.AfterMS, o.Error, o.Output, now, r)
}
