package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// nextDueTimeout bounds the query behind NextDue, which has no context.
const nextDueTimeout = 5 * time.Second

// NextDue implements store.Store. It answers from a cache that every change
// made here, every notification and every poll invalidates; then it asks the
// database. If the database does not answer, it reports no due job: the
// next poll wakes the dispatcher to look again.
func (s *Store) NextDue() (int64, bool) {
	s.mu.Lock()
	if s.due.valid || s.closed {
		at, has := s.due.at, s.due.has && !s.closed
		s.mu.Unlock()
		if !has {
			return 0, false
		}
		return at, true
	}
	gen := s.due.gen
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, nextDueTimeout)
	defer cancel()
	var due *int64
	// In a read-only transaction of one round trip (BEGIN, the query,
	// COMMIT sent together by pipeTxOnce) that plans as a claim does
	// (claimPlans): nextDueSQL costs more to plan than to run, and a
	// custom plan at each of the first five calls on each connection was
	// most of what a burst of work on fresh connections spent on it (W1 at
	// 256 slots, 5 000 jobs: 25-29 calls, 22.5 ms planning).
	err := s.pipeTxOnce(ctx, func(_ querier, first *pgx.Batch) (*pgx.Batch, error) {
		first.Queue("SET TRANSACTION READ ONLY")
		first.Queue("SELECT " + claimPlans)
		first.Queue(nextDueSQL, int64(math.MinInt64)).QueryRow(func(row pgx.Row) error { return row.Scan(&due) })
		return first, nil
	})
	if err != nil {
		if s.ctx.Err() == nil {
			s.log.Warn("pgstore: reading the next due time failed; looking again at the next poll", "err", err)
		}
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.due.gen == gen {
		s.due.valid, s.due.has = true, due != nil
		if due != nil {
			s.due.at = *due
		}
	}
	if due == nil {
		return 0, false
	}
	return *due, true
}

// Job implements store.Store.
func (s *Store) Job(ctx context.Context, id uint64) (state.Job, error) {
	if err := s.usable(); err != nil {
		return state.Job{}, err
	}
	r, err := scanRow(s.pool.QueryRow(ctx, "SELECT "+jobCols+" FROM runlog_jobs WHERE id = $1", int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return state.Job{}, store.ErrNotFound
	}
	if err != nil {
		return state.Job{}, fmt.Errorf("pgstore: job %d: %w", id, err)
	}
	return r.toJob(), nil
}

// stateCode maps a state name to its code, and false for an unknown name.
func stateCode(name string) (int16, bool) {
	for st := state.Pending; st <= state.Cancelled; st++ {
		if st.String() == name {
			return int16(st), true
		}
	}
	return 0, false
}

// List implements store.Store: the same pages as the embedded store.
func (s *Store) List(ctx context.Context, f store.Filter) ([]state.Job, uint64, error) {
	if err := s.usable(); err != nil {
		return nil, 0, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	var (
		conds []string
		args  []any
	)
	arg := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if f.State != "" {
		code, ok := stateCode(f.State)
		if !ok {
			return nil, 0, nil
		}
		// A literal, not a parameter: a generic plan cannot tell which
		// partial index (runlog_jobs_active, runlog_jobs_ended) covers it.
		conds = append(conds, "state = "+strconv.Itoa(int(code)))
	}
	if f.Kind != "" {
		arg("kind = $?", f.Kind)
	}
	if f.Target != "" {
		arg("target = $?", f.Target)
	}
	if f.Schedule != "" {
		arg("schedule = $?", f.Schedule)
	}
	if f.Search != "" {
		arg("(id::text = $? OR starts_with(key, $?))", f.Search)
	}
	order := "DESC"
	if f.Oldest {
		order = "ASC"
		if f.After != 0 {
			arg("id > $?", int64(f.After))
		}
	} else if f.After != 0 {
		arg("id < $?", int64(f.After))
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, limit+1)
	rows, err := queryRows(ctx, s.pool, fmt.Sprintf("SELECT %s FROM runlog_jobs%s ORDER BY id %s LIMIT $%d", jobCols, where, order, len(args)), args...)
	if err != nil {
		return nil, 0, fmt.Errorf("pgstore: list: %w", err)
	}
	var next uint64
	if len(rows) > limit {
		rows = rows[:limit]
		next = rows[limit-1].ID
	}
	out := make([]state.Job, len(rows))
	for i, r := range rows {
		out[i] = r.toJob()
	}
	return out, next, nil
}

// Stats implements store.Store: counts by state (one GROUP BY over the
// table) and the oldest due time.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	if err := s.usable(); err != nil {
		return store.Stats{}, err
	}
	var st store.Stats
	rows, err := s.pool.Query(ctx, "SELECT state, count(*) FROM runlog_jobs GROUP BY state")
	if err != nil {
		return st, fmt.Errorf("pgstore: stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			code int16
			n    int
		)
		if err := rows.Scan(&code, &n); err != nil {
			return st, err
		}
		switch state.JobState(code) {
		case state.Pending:
			st.Counts.Pending = n
		case state.Running:
			st.Counts.Running = n
		case state.Succeeded:
			st.Counts.Succeeded = n
		case state.Failed:
			st.Counts.Failed = n
		case state.Cancelled:
			st.Counts.Cancelled = n
		}
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	var due *int64
	// The held jobs of disabled targets are left out, as the embedded
	// store's OldestDue leaves them out: their age would be the queue's
	// lag for as long as the target stays disabled.
	if err := s.pool.QueryRow(ctx, "SELECT min(due) FROM runlog_jobs WHERE state = "+pendingCode+" AND target NOT IN ("+disabledTargetSet+")").Scan(&due); err != nil {
		return st, fmt.Errorf("pgstore: stats: %w", err)
	}
	if due != nil {
		st.OldestDue, st.HasDue = *due, true
	}
	return st, nil
}

// Targets implements store.Store: every target whose breaker is not the
// zero breaker or that has jobs pending or running, in byte order, with its
// breaker and its pending and running counts.
func (s *Store) Targets(ctx context.Context) ([]store.TargetInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	byTarget := make(map[string]*store.TargetInfo)
	info := func(t string) *store.TargetInfo {
		ti, ok := byTarget[t]
		if !ok {
			ti = &store.TargetInfo{Target: t}
			byTarget[t] = ti
		}
		return ti
	}
	rows, err := s.pool.Query(ctx, nonZeroBreakersSQL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: targets: %w", err)
	}
	brs, err := readBreakers(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: targets: %w", err)
	}
	for t, b := range brs {
		info(t).Breaker = b
	}
	load, err := s.pool.Query(ctx, `SELECT target, count(*) FILTER (WHERE state = `+pendingCode+`), count(*) FILTER (WHERE state = `+runningCode+`)
		FROM runlog_jobs WHERE state IN (`+pendingCode+`, `+runningCode+`) GROUP BY target`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: target load: %w", err)
	}
	defer load.Close()
	for load.Next() {
		var (
			t                string
			pending, running int
		)
		if err := load.Scan(&t, &pending, &running); err != nil {
			return nil, err
		}
		ti := info(t)
		ti.Pending, ti.Running = pending, running
	}
	if err := load.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: target load: %w", err)
	}
	if err := s.addLives(ctx, byTarget); err != nil {
		return nil, err
	}
	if err := s.flowTargets(ctx, byTarget, info); err != nil {
		return nil, err
	}
	if len(byTarget) == 0 {
		return nil, nil
	}
	out := make([]store.TargetInfo, 0, len(byTarget))
	for _, ti := range byTarget {
		out = append(out, *ti)
	}
	slices.SortFunc(out, func(a, b store.TargetInfo) int { return strings.Compare(a.Target, b.Target) })
	return out, nil
}
