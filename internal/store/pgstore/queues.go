package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// queueLock is the key of the transaction advisory lock that orders queue
// changes with claims: every claim holds it shared while it decides, a
// change of a queue's setting holds it exclusive. A pause therefore waits
// for the claims in flight to commit, and every claim after it reads the
// queue paused: no attempt of a paused queue starts, on any node, once
// SetQueue has returned ("runlq" in ASCII).
const queueLock int64 = 0x72756e6c71

// pausedQueueSet is the SQL query of the paused queues' names, for a
// NOT IN (see dueWhere); pausedQueues is it as an array.
const (
	pausedQueueSet = `SELECT name FROM runlog_queues WHERE paused`
	pausedQueues   = `ARRAY(` + pausedQueueSet + `)`
)

// claimQueues is what a claim knows of the queues that are paused or
// bounded (the others have the zero setting), with the attempts of each
// bounded one running across the nodes, the claim's own starts included:
// the claim's state.QueueView.
type claimQueues map[string]state.QueueInfo

// Queue implements state.QueueView.
func (q claimQueues) Queue(name string) state.QueueInfo {
	if qi, ok := q[name]; ok {
		return qi
	}
	return state.QueueInfo{QueueSetting: state.QueueSetting{Name: name}}
}

// applied counts op, a start or a defer of a job of the queue name that
// the claim applied: a start as running, and both in the queue's pace
// when it has a rate limit (state.PaceAfter). It reports whether the pace
// changed.
func (q claimQueues) applied(name string, op *state.Op) bool {
	qi, ok := q[name]
	if !ok {
		return false
	}
	if op.Kind == state.OpStart {
		qi.Running++
	}
	paced := false
	if !qi.Limit.IsZero() {
		p := state.PaceAfter(qi.Pace, qi.Limit, op)
		paced, qi.Pace = p != qi.Pace, p
	}
	q[name] = qi
	return paced
}

// queueLockSharedSQL takes the shared queueLock (queueStartReads), the
// first statement of every claim's transaction, and sets how the rest of
// it is planned (claimPlans).
const queueLockSharedSQL = "SELECT pg_advisory_xact_lock_shared($1), " + claimPlans

// queueSettingCols are the columns of a queue's setting that a claim
// reads, in the order readQueueSettings scans them; queueHasSettingSQL
// selects the queues whose setting a claim must know.
const (
	queueSettingCols   = "name, concurrency, paused, rate_milli, burst"
	queueHasSettingSQL = "paused OR concurrency > 0 OR rate_milli > 0"
)

// readQueueSettings reads queue rows (queueSettingCols) and closes rows.
func readQueueSettings(rows rowScanner) (claimQueues, error) {
	defer rows.Close()
	qs := claimQueues{}
	for rows.Next() {
		var qi state.QueueInfo
		var conc, burst int32
		if err := rows.Scan(&qi.Name, &conc, &qi.Paused, &qi.Limit.RateMilli, &burst); err != nil {
			return nil, err
		}
		qi.Concurrency, qi.Limit.Burst = int(conc), int(burst)
		qs[qi.Name] = qi
	}
	return qs, rows.Err()
}

// countBounded counts the running attempts of the bounded queues (whose
// rows the claim has locked, queueStartReads), across the nodes, into q: one
// round trip, only when a queue has a concurrency.
func countBounded(ctx context.Context, tx querier, q claimQueues) error {
	var names []string
	for name, qi := range q {
		if qi.Concurrency > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	var b pgx.Batch
	b.Queue("SELECT queue, count(*) FROM runlog_jobs WHERE state = "+runningCode+" AND queue = ANY($1) GROUP BY queue", names).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				return err
			}
			qi := q[name]
			qi.Running = int(n)
			q[name] = qi
		}
		return rows.Err()
	})
	return sendBatch(ctx, tx, &b)
}

// Queues implements store.Store.
func (s *Store) Queues(ctx context.Context) ([]state.QueueInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT name, concurrency, paused, 0, 0, rate_milli, burst, tat, reserved FROM runlog_queues
		UNION ALL SELECT queue, 0, false, count(*) FILTER (WHERE state = `+pendingCode+`), count(*) FILTER (WHERE state = `+runningCode+`), 0, 0, 0, 0
			FROM runlog_jobs WHERE state <= `+runningCode+` GROUP BY queue`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: queues: %w", err)
	}
	defer rows.Close()
	byName := map[string]*state.QueueInfo{"": {}}
	for rows.Next() {
		var (
			name             string
			conc             int32
			paused           bool
			pending, running int64
			rate             int64
			burst            int32
			pace             state.Pace
		)
		if err := rows.Scan(&name, &conc, &paused, &pending, &running, &rate, &burst, &pace.Bucket.TAT, &pace.Reserved); err != nil {
			return nil, fmt.Errorf("pgstore: queues: %w", err)
		}
		qi := byName[name]
		if qi == nil {
			qi = &state.QueueInfo{QueueSetting: state.QueueSetting{Name: name}}
			byName[name] = qi
		}
		qi.Concurrency, qi.Paused = max(qi.Concurrency, int(conc)), qi.Paused || paused
		if rate > 0 {
			qi.Limit, qi.Pace = retry.Limit{RateMilli: rate, Burst: int(burst)}, pace
		}
		qi.Pending += int(pending)
		qi.Running += int(running)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: queues: %w", err)
	}
	out := make([]state.QueueInfo, 0, len(byName))
	for _, qi := range byName {
		if qi.Name == "" || qi.Pending+qi.Running > 0 || !qi.QueueSetting.IsZero() {
			out = append(out, *qi)
		}
	}
	slices.SortFunc(out, func(a, b state.QueueInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// SetQueue implements store.Store: under the exclusive queueLock, it
// writes the queue's row (a queue back to the zero setting loses its
// row), and notifies the nodes once committed, so that a resumed queue's
// due jobs start without waiting for a poll.
func (s *Store) SetQueue(ctx context.Context, now int64, name string, concurrency *int, paused *bool, limit *retry.Limit) (state.QueueInfo, error) {
	if err := s.usable(); err != nil {
		return state.QueueInfo{}, err
	}
	if concurrency != nil && (*concurrency < 0 || *concurrency > state.MaxQueueConcurrency) {
		return state.QueueInfo{}, fmt.Errorf("pgstore: queue concurrency %d out of range 0-%d", *concurrency, state.MaxQueueConcurrency)
	}
	if err := validQueueLimit(name, limit); err != nil {
		return state.QueueInfo{}, err
	}
	var set state.QueueSetting
	err := s.inTx(ctx, true, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", queueLock); err != nil {
			return err
		}
		set = state.QueueSetting{Name: name}
		var conc, burst int32
		err := tx.QueryRow(ctx, "SELECT concurrency, paused, rate_milli, burst FROM runlog_queues WHERE name = $1", name).Scan(&conc, &set.Paused, &set.Limit.RateMilli, &burst)
		if err != nil && err != pgx.ErrNoRows {
			return err
		}
		set.Concurrency, set.Limit.Burst = int(conc), int(burst)
		if concurrency != nil {
			set.Concurrency = *concurrency
		}
		if paused != nil {
			set.Paused = *paused
		}
		if limit != nil {
			set.Limit = *limit
		}
		return setQueueRow(ctx, tx, name, set)
	})
	if err != nil {
		return state.QueueInfo{}, fmt.Errorf("pgstore: set queue %q: %w", name, err)
	}
	s.invalidate()
	s.wake()
	s.wakeNodes()
	info := state.QueueInfo{QueueSetting: set}
	if qs, err := s.Queues(ctx); err == nil {
		for _, qi := range qs {
			if qi.Name == name {
				info = qi
			}
		}
	}
	return info, nil
}

// noteBounded remembers which queues a claim found bounded, so that an
// attempt of one ending here wakes the other nodes (endedBounded): a due
// job of the queue that a node held back may start now; and whether no
// queue had a setting (plain, for the next claim's first round).
func (s *Store) noteBounded(qs claimQueues) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plain = len(qs) == 0
	clear(s.bounded)
	for name, qi := range qs {
		if qi.Concurrency > 0 {
			if s.bounded == nil {
				s.bounded = make(map[string]bool)
			}
			s.bounded[name] = true
		}
	}
}

// endedBounded reports whether one of the flights belongs to a queue that
// the last claim found bounded.
func (s *Store) endedBounded(fls []*flight) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bounded) == 0 {
		return false
	}
	for _, f := range fls {
		if f != nil && s.bounded[f.facts.Queue] {
			return true
		}
	}
	return false
}
