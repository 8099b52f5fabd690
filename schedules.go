package runlog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

// Errors of the schedule methods; test them with errors.Is. A definition
// that is not valid answers ErrInvalid with what to change.
var (
	// ErrScheduleExists: CreateSchedule of a name a schedule has.
	ErrScheduleExists = errors.New("runlog: a schedule with that name exists")
	// ErrScheduleNotFound: no schedule has that name.
	ErrScheduleNotFound = errors.New("runlog: schedule not found")
	// ErrTooManySchedules: the runner keeps MaxSchedules schedules already.
	ErrTooManySchedules = fmt.Errorf("runlog: too many schedules (at most %d); delete one first", state.MaxSchedules)
)

// MaxSchedules bounds how many schedules a runner keeps.
const MaxSchedules = state.MaxSchedules

// ScheduleRequest defines a schedule: a periodic job.
type ScheduleRequest struct {
	// Name identifies the schedule: 1 to 64 letters, digits, '.', '_' and
	// '-', starting with a letter or digit.
	Name string
	// Cron is a cron expression: five fields (minute hour day-of-month
	// month day-of-week, such as "0 3 * * *"), or six with seconds first,
	// or a descriptor such as "@daily". Set Cron or Every, not both.
	Cron string
	// Every is a fixed interval, at least one second: the ticks are the
	// time the schedule was created (or last updated) plus whole intervals.
	Every time.Duration
	// TimeZone is the IANA zone Cron is read in, such as "Europe/Paris";
	// "" is UTC. An Every schedule has none.
	TimeZone string
	// Job is the template of the job each tick makes: Kind (or Args),
	// Payload, Target, Retry and Timeout as for EnqueueJob. It may not set
	// RunAt, Delay or Key: a tick's job is due at its tick, and is its
	// tick's only job.
	Job JobRequest
	// Overlap is "allow" (the default): each tick makes its job; or
	// "skip": a tick is skipped while the schedule's previous job is
	// pending or running.
	Overlap string
	// CatchUp says what the ticks missed while nothing ran become when the
	// runner is back: "latest" (the default) runs the latest one once,
	// "skip" runs none (a tick noticed more than a second late is
	// missed), "all" runs each, up to the latest 100.
	CatchUp string
}

// Schedule is a schedule as the runner keeps it.
type Schedule struct {
	Name     string
	Cron     string
	Every    time.Duration
	TimeZone string
	// Job is the template of the schedule's jobs (Kind, Payload, Target,
	// Retry, Timeout).
	Job     JobRequest
	Overlap string
	CatchUp string
	// Paused: no tick makes a job; resuming skips the ticks that came due
	// while paused.
	Paused bool
	// Next is the next tick (zero when there is none: the expression
	// matches no date, or its time zone is unknown on this host). A paused
	// schedule shows the tick it would make next.
	Next time.Time
	// LastTick is the latest tick dealt with (a job made, or the tick
	// skipped); the creation time before the first.
	LastTick time.Time
	// LastJob is the id of the latest job a tick made; 0 for none.
	LastJob uint64
	// CreatedAt is when the schedule was created.
	CreatedAt time.Time
}

// scheduler returns the runner's store as a Scheduler.
func (r *Runner) scheduler() (store.Scheduler, error) {
	sch, ok := r.st.(store.Scheduler)
	if !ok {
		return nil, fmt.Errorf("%w: this runner's store keeps no schedules", ErrInvalid)
	}
	return sch, nil
}

// scheduleDef validates req and builds its stored definition.
func (r *Runner) scheduleDef(req *ScheduleRequest) (*state.ScheduleDef, error) {
	if err := state.ValidScheduleName(req.Name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	job := req.Job
	if !job.RunAt.IsZero() || job.Delay != 0 {
		return nil, fmt.Errorf("%w: a schedule's job is due at its tick; drop its run_at or delay", ErrInvalid)
	}
	if job.Key != "" {
		return nil, fmt.Errorf("%w: a schedule's job has no idempotency key (each tick makes its own job); drop the key", ErrInvalid)
	}
	nj, err := r.newJob(&job, time.Time{})
	if err != nil {
		return nil, err
	}
	if req.Every < 0 || req.Every%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: every %v: give a positive interval of whole milliseconds, at least 1s", ErrInvalid, req.Every)
	}
	def := &state.ScheduleDef{Cron: req.Cron, EveryMS: req.Every.Milliseconds(), Zone: req.TimeZone, Job: nj.Spec}
	if def.Overlap, err = state.ParseOverlap(req.Overlap); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if def.CatchUp, err = state.ParseCatchUp(req.CatchUp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := def.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return def, nil
}

// CreateSchedule adds a schedule and returns it once it is durable; from
// then on every tick makes exactly one job (across crashes and restarts,
// and on PostgreSQL across nodes), by the schedule's overlap and catch-up
// rules. A name in use answers ErrScheduleExists.
func (r *Runner) CreateSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error) {
	def, err := r.scheduleDef(&req)
	if err != nil {
		return Schedule{}, err
	}
	return r.changeSchedule(ctx, state.ScheduleChange{Action: state.SchedCreate, Name: req.Name, Def: def})
}

// UpdateSchedule replaces the definition of the schedule req.Name from now
// on: its next tick is the new definition's first after now (an interval
// counts from now). Its position, pause and jobs stay.
func (r *Runner) UpdateSchedule(ctx context.Context, req ScheduleRequest) (Schedule, error) {
	def, err := r.scheduleDef(&req)
	if err != nil {
		return Schedule{}, err
	}
	return r.changeSchedule(ctx, state.ScheduleChange{Action: state.SchedUpdate, Name: req.Name, Def: def})
}

// PauseSchedule pauses a schedule: no tick makes a job until it is resumed.
func (r *Runner) PauseSchedule(ctx context.Context, name string) (Schedule, error) {
	return r.changeSchedule(ctx, state.ScheduleChange{Action: state.SchedPause, Name: name})
}

// ResumeSchedule resumes a paused schedule; the ticks that came due while
// it was paused are skipped.
func (r *Runner) ResumeSchedule(ctx context.Context, name string) (Schedule, error) {
	return r.changeSchedule(ctx, state.ScheduleChange{Action: state.SchedResume, Name: name})
}

// DeleteSchedule removes a schedule; the jobs it made stay.
func (r *Runner) DeleteSchedule(ctx context.Context, name string) error {
	_, err := r.changeSchedule(ctx, state.ScheduleChange{Action: state.SchedDelete, Name: name})
	return err
}

func (r *Runner) changeSchedule(ctx context.Context, c state.ScheduleChange) (Schedule, error) {
	if err := r.usable(); err != nil {
		return Schedule{}, err
	}
	sch, err := r.scheduler()
	if err != nil {
		return Schedule{}, err
	}
	if c.Action != state.SchedCreate {
		if err := state.ValidScheduleName(c.Name); err != nil {
			return Schedule{}, ErrScheduleNotFound
		}
	}
	sc, err := sch.ChangeSchedule(ctx, r.nowMS(), c)
	if err != nil {
		return Schedule{}, mapScheduleErr(err)
	}
	r.signalSchedules()
	return publicSchedule(&sc), nil
}

// Schedules returns every schedule, in name order.
func (r *Runner) Schedules(ctx context.Context) ([]Schedule, error) {
	sch, err := r.scheduler()
	if err != nil {
		return nil, err
	}
	list, err := sch.Schedules(ctx)
	if err != nil {
		return nil, mapScheduleErr(err)
	}
	out := make([]Schedule, len(list))
	for i := range list {
		out[i] = publicSchedule(&list[i])
	}
	return out, nil
}

// Schedule returns one schedule, or ErrScheduleNotFound.
func (r *Runner) Schedule(ctx context.Context, name string) (Schedule, error) {
	sc, err := r.storedSchedule(ctx, name)
	if err != nil {
		return Schedule{}, err
	}
	return publicSchedule(&sc), nil
}

// NextTicks returns the next n ticks of a schedule (at most 100), in
// order; fewer when its expression has no more.
func (r *Runner) NextTicks(ctx context.Context, name string, n int) ([]time.Time, error) {
	sc, err := r.storedSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	ticks := sc.NextTicks(min(max(n, 0), 100))
	out := make([]time.Time, len(ticks))
	for i, t := range ticks {
		out[i] = time.UnixMilli(t)
	}
	return out, nil
}

func (r *Runner) storedSchedule(ctx context.Context, name string) (state.Schedule, error) {
	sch, err := r.scheduler()
	if err != nil {
		return state.Schedule{}, err
	}
	if state.ValidScheduleName(name) != nil {
		return state.Schedule{}, ErrScheduleNotFound
	}
	sc, err := sch.Schedule(ctx, name)
	return sc, mapScheduleErr(err)
}

func mapScheduleErr(err error) error {
	switch {
	case errors.Is(err, store.ErrScheduleExists):
		return ErrScheduleExists
	case errors.Is(err, store.ErrScheduleNotFound):
		return ErrScheduleNotFound
	case errors.Is(err, store.ErrTooManySchedules):
		return ErrTooManySchedules
	}
	return mapErr(err)
}

// publicSchedule converts a stored schedule.
func publicSchedule(sc *state.Schedule) Schedule {
	d := &sc.Def
	out := Schedule{
		Name: sc.Name, Cron: d.Cron, Every: time.Duration(d.EveryMS) * time.Millisecond, TimeZone: d.Zone,
		Job: JobRequest{Kind: d.Job.Kind, Payload: d.Job.Payload, Target: d.Job.Target,
			Timeout: time.Duration(d.Job.TimeoutMS) * time.Millisecond},
		Overlap: d.Overlap.String(), CatchUp: d.CatchUp.String(), Paused: sc.Paused,
		LastTick: msTime(sc.LastTick), LastJob: sc.LastJob, CreatedAt: msTime(sc.CreatedAt),
	}
	p := fromPolicy(d.Job.Policy)
	out.Job.Retry = &p
	if n, ok := sc.Next(); ok {
		out.Next = time.UnixMilli(n)
	}
	return out
}

// signalSchedules wakes the schedule loop; it never blocks.
func (r *Runner) signalSchedules() {
	select {
	case r.schedWake <- struct{}{}:
	default:
	}
}

// scheduleLoop deals with the schedules' ticks: it asks the store to
// enqueue every due tick, then sleeps until the earliest next tick (on the
// wall clock where it can, like the dispatcher), a schedule change here or
// on another node, or Close. It never polls.
func (r *Runner) scheduleLoop(sch store.Scheduler) {
	defer close(r.schedDone)
	var wall *wallTimer
	if _, ok := r.cfg.Clock.(systemClock); ok {
		if t, err := newWallTimer(); err == nil {
			wall = t
		}
	}
	defer func() {
		if wall != nil {
			wall.close()
		}
	}()
	backoff := 10 * time.Millisecond
	for {
		now := r.nowMS()
		made, next, ok, err := sch.Tick(r.base, now)
		if made > 0 {
			r.signal()
		}
		var (
			timer  <-chan time.Time
			wallC  <-chan struct{}
			stopT  = func() bool { return false }
			waitMS int64
		)
		switch {
		case err != nil && errors.Is(err, store.ErrClosed):
			return
		case err != nil && !r.transient(err):
			r.fail(err)
			return
		case err != nil:
			r.log.Warn("runlog: dealing with the schedules' ticks failed; trying again", "err", err, "retry_in", backoff)
			waitMS, ok = backoff.Milliseconds(), true
			next = now + waitMS
			backoff = min(backoff*2, 5*time.Second)
		default:
			backoff = 10 * time.Millisecond
			waitMS = next - now
		}
		if ok {
			if wall != nil && err == nil {
				if werr := wall.arm(next); werr == nil {
					wallC = wall.C()
				} else {
					wall.close()
					wall = nil
				}
			}
			if wallC == nil {
				timer, stopT = r.cfg.Clock.NewTimer(min(time.Duration(max(waitMS, 0))*time.Millisecond, stepBound))
			}
		} else if wall != nil {
			wall.disarm()
		}
		select {
		case <-r.stop:
			stopT()
			return
		case <-r.schedWake:
		case <-timer:
		case <-wallC:
		}
		stopT()
	}
}
