package pgstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

var _ store.Scheduler = (*Store)(nil)

// chanSchedules is the channel a node NOTIFYs after it changed a schedule,
// so that every node looks at the schedules again (store.Notify.Schedules).
const chanSchedules = "runlog_schedules"

// scheduleCols are the columns scanSchedule reads, in order.
const scheduleCols = `name, cron, every_ms, zone, overlap, catch_up, kind, target, payload, attempts, base_ms, cap_ms,
	deadline_ms, timeout_ms, queue, priority, anchor, last_tick, last_job, paused, created_at`

// scanSchedule reads one row of scheduleCols.
func scanSchedule(row pgx.Row) (*state.Schedule, error) {
	var (
		name, overlap, catchUp string
		d                      state.ScheduleDef
		anchor, lastTick, job  int64
		created                int64
		paused                 bool
	)
	p := &d.Job.Policy
	err := row.Scan(&name, &d.Cron, &d.EveryMS, &d.Zone, &overlap, &catchUp, &d.Job.Kind, &d.Job.Target, &d.Job.Payload,
		&p.Attempts, &p.BaseMS, &p.CapMS, &p.DeadlineMS, &d.Job.TimeoutMS, &d.Job.Queue, &d.Job.Priority,
		&anchor, &lastTick, &job, &paused, &created)
	if err != nil {
		return nil, err
	}
	if d.Overlap, err = state.ParseOverlap(overlap); err != nil {
		return nil, fmt.Errorf("pgstore: schedule %q: %w", name, err)
	}
	if d.CatchUp, err = state.ParseCatchUp(catchUp); err != nil {
		return nil, fmt.Errorf("pgstore: schedule %q: %w", name, err)
	}
	return state.RestoreSchedule(name, d, anchor, lastTick, uint64(job), paused, created), nil
}

// ChangeSchedule implements store.Scheduler: one transaction, then a
// NOTIFY so that the other nodes look at the schedules again.
func (s *Store) ChangeSchedule(ctx context.Context, now int64, c state.ScheduleChange) (state.Schedule, error) {
	if err := s.usable(); err != nil {
		return state.Schedule{}, err
	}
	var out state.Schedule
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		out = state.Schedule{}
		if c.Action == state.SchedCreate {
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM runlog_schedules").Scan(&n); err != nil {
				return err
			}
			if n >= state.MaxSchedules {
				return store.ErrTooManySchedules
			}
			d := c.Def
			tag, err := tx.Exec(ctx, `INSERT INTO runlog_schedules (name, cron, every_ms, zone, overlap, catch_up, kind, target, payload,
					attempts, base_ms, cap_ms, deadline_ms, timeout_ms, queue, priority, anchor, last_tick, created_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $17, $17)
				ON CONFLICT (name) DO NOTHING`,
				c.Name, d.Cron, d.EveryMS, d.Zone, d.Overlap.String(), d.CatchUp.String(), d.Job.Kind, d.Job.Target, d.Job.Payload,
				int32(d.Job.Policy.Attempts), d.Job.Policy.BaseMS, d.Job.Policy.CapMS, d.Job.Policy.DeadlineMS, d.Job.TimeoutMS,
				d.Job.Queue, d.Job.Priority, now)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return store.ErrScheduleExists
			}
		} else {
			var tag interface{ RowsAffected() int64 }
			var err error
			switch c.Action {
			case state.SchedUpdate:
				d := c.Def
				tag, err = tx.Exec(ctx, `UPDATE runlog_schedules SET cron = $2, every_ms = $3, zone = $4, overlap = $5, catch_up = $6,
						kind = $7, target = $8, payload = $9, attempts = $10, base_ms = $11, cap_ms = $12, deadline_ms = $13,
						timeout_ms = $14, queue = $15, priority = $16, anchor = $17, last_tick = greatest(last_tick, $17)
					WHERE name = $1`,
					c.Name, d.Cron, d.EveryMS, d.Zone, d.Overlap.String(), d.CatchUp.String(), d.Job.Kind, d.Job.Target, d.Job.Payload,
					int32(d.Job.Policy.Attempts), d.Job.Policy.BaseMS, d.Job.Policy.CapMS, d.Job.Policy.DeadlineMS, d.Job.TimeoutMS,
					d.Job.Queue, d.Job.Priority, now)
			case state.SchedPause:
				tag, err = tx.Exec(ctx, "UPDATE runlog_schedules SET paused = true WHERE name = $1", c.Name)
			case state.SchedResume:
				tag, err = tx.Exec(ctx, "UPDATE runlog_schedules SET paused = false, last_tick = greatest(last_tick, $2) WHERE name = $1", c.Name, now)
			case state.SchedDelete:
				tag, err = tx.Exec(ctx, "DELETE FROM runlog_schedules WHERE name = $1", c.Name)
			case state.SchedSkip:
				tag, err = tx.Exec(ctx, "UPDATE runlog_schedules SET last_tick = greatest(last_tick, $2) WHERE name = $1", c.Name, c.Tick)
			default:
				return fmt.Errorf("pgstore: unknown schedule action %v", c.Action)
			}
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				return store.ErrScheduleNotFound
			}
		}
		if c.Action != state.SchedDelete {
			sc, err := scanSchedule(tx.QueryRow(ctx, "SELECT "+scheduleCols+" FROM runlog_schedules WHERE name = $1", c.Name))
			if err != nil {
				return err
			}
			out = *sc
		}
		_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", chanSchedules, s.opts.Node)
		return err
	})
	if err != nil {
		if errors.Is(err, store.ErrScheduleExists) || errors.Is(err, store.ErrScheduleNotFound) || errors.Is(err, store.ErrTooManySchedules) {
			return state.Schedule{}, err
		}
		return state.Schedule{}, fmt.Errorf("pgstore: %v schedule %q (nothing changed): %w", c.Action, c.Name, err)
	}
	return out, nil
}

// Schedules implements store.Scheduler.
func (s *Store) Schedules(ctx context.Context) ([]state.Schedule, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT "+scheduleCols+" FROM runlog_schedules ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("pgstore: list schedules: %w", err)
	}
	defer rows.Close()
	var out []state.Schedule
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *sc)
	}
	return out, rows.Err()
}

// Schedule implements store.Scheduler.
func (s *Store) Schedule(ctx context.Context, name string) (state.Schedule, error) {
	if err := s.usable(); err != nil {
		return state.Schedule{}, err
	}
	sc, err := scanSchedule(s.pool.QueryRow(ctx, "SELECT "+scheduleCols+" FROM runlog_schedules WHERE name = $1", name))
	if errors.Is(err, pgx.ErrNoRows) {
		return state.Schedule{}, store.ErrScheduleNotFound
	}
	if err != nil {
		return state.Schedule{}, fmt.Errorf("pgstore: schedule %q: %w", name, err)
	}
	return *sc, nil
}

// Tick implements store.Scheduler. Each schedule with a due tick is dealt
// with in a transaction of its own: lock its row, read the previous job's
// state, Plan, advance last_tick only forward (so that a node that read an
// older position makes nothing) and insert the tick's jobs. Two nodes that
// look at once make the tick once: the second waits for the first's lock
// and then finds the tick dealt with.
func (s *Store) Tick(ctx context.Context, now int64) (int, int64, bool, error) {
	list, err := s.Schedules(ctx)
	if err != nil {
		return 0, 0, false, err
	}
	made := 0
	for i := range list {
		sc := &list[i]
		if t, ok := sc.Next(); !ok || t > now || sc.Paused {
			continue
		}
		var fresh *state.Schedule
		got := 0
		err := s.inTx(ctx, false, func(tx pgx.Tx) error {
			got = 0
			var err error
			fresh, err = scanSchedule(tx.QueryRow(ctx, "SELECT "+scheduleCols+" FROM runlog_schedules WHERE name = $1 FOR UPDATE", sc.Name))
			if errors.Is(err, pgx.ErrNoRows) {
				fresh = nil
				return nil // deleted meanwhile
			}
			if err != nil {
				return err
			}
			got, err = s.tickTx(ctx, tx, fresh, now)
			return err
		})
		made += got
		if err != nil {
			return made, 0, false, fmt.Errorf("pgstore: tick of schedule %q (nothing was made for it): %w", sc.Name, err)
		}
		if fresh != nil {
			list[i] = *fresh
		}
	}
	if made > 0 {
		s.wakeNodes()
	}
	next, ok := int64(0), false
	for i := range list {
		if t, has := list[i].Next(); has && !list[i].Paused && (!ok || t < next) {
			next, ok = t, true
		}
	}
	return made, next, ok, nil
}

// tickTx carries out sc's plan at now in tx (sc's row locked) and moves sc
// to its new position; it returns how many jobs it made.
func (s *Store) tickTx(ctx context.Context, tx pgx.Tx, sc *state.Schedule, now int64) (int, error) {
	unfinished := false
	if sc.LastJob != 0 {
		var st int16
		err := tx.QueryRow(ctx, "SELECT state FROM runlog_jobs WHERE id = $1", int64(sc.LastJob)).Scan(&st)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, err
		}
		unfinished = err == nil && !state.JobState(st).Finished()
	}
	p := sc.Plan(now, unfinished)
	if p.Skip != 0 {
		if _, err := tx.Exec(ctx, "UPDATE runlog_schedules SET last_tick = $2 WHERE name = $1 AND last_tick < $2", sc.Name, p.Skip); err != nil {
			return 0, err
		}
		sc.LastTick = p.Skip
		return 0, nil
	}
	if len(p.Ticks) == 0 {
		return 0, nil
	}
	last := p.Ticks[len(p.Ticks)-1]
	tag, err := tx.Exec(ctx, "UPDATE runlog_schedules SET last_tick = $2 WHERE name = $1 AND last_tick < $3", sc.Name, last, p.Ticks[0])
	if err != nil {
		return 0, err
	}
	if tag.RowsAffected() == 0 {
		return 0, nil // another node dealt with these ticks
	}
	jobs := make([]store.NewJob, len(p.Ticks))
	for i, t := range p.Ticks {
		jobs[i] = store.NewJob{Spec: sc.Def.Job, Due: t}
		jobs[i].Spec.Schedule, jobs[i].Spec.Tick = sc.Name, t
	}
	out, err := enqueueTx(ctx, tx, now, jobs, false)
	if err != nil {
		return 0, err
	}
	ids := make([]int64, len(out))
	for i, e := range out {
		ids[i] = int64(e.ID)
	}
	if _, err := tx.Exec(ctx, `UPDATE runlog_jobs j SET schedule = $1, tick = u.tick
		FROM unnest($2::bigint[], $3::bigint[]) AS u(id, tick) WHERE j.id = u.id`, sc.Name, ids, p.Ticks); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "UPDATE runlog_schedules SET last_job = $2 WHERE name = $1", sc.Name, ids[len(ids)-1]); err != nil {
		return 0, err
	}
	sc.LastTick, sc.LastJob = last, uint64(ids[len(ids)-1])
	return len(ids), nil
}

// schedulesChanged tells the engine that another node changed a schedule
// (or that notifications may have been missed).
func (s *Store) schedulesChanged() {
	s.mu.Lock()
	fn := s.notify.Schedules
	s.mu.Unlock()
	if fn != nil {
		fn()
	}
}
