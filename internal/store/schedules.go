package store

import (
	"context"
	"errors"

	"github.com/runlog/runlog/internal/state"
)

// Errors of the schedule calls.
var (
	// ErrScheduleExists: a schedule has that name.
	ErrScheduleExists = errors.New("store: a schedule with that name exists")
	// ErrScheduleNotFound: no schedule has that name.
	ErrScheduleNotFound = errors.New("store: no schedule has that name")
	// ErrTooManySchedules: the store holds state.MaxSchedules schedules.
	ErrTooManySchedules = errors.New("store: too many schedules")
)

// Scheduler is a store that keeps durable schedules (both stores). The
// caller validates names and definitions (state.ValidScheduleName,
// ScheduleDef.Validate); the store decides, with state.Schedule.Plan, which
// ticks to enqueue, and makes each tick's job and the schedule's advance
// one durable step.
type Scheduler interface {
	// ChangeSchedule makes the change durable at now and returns the
	// schedule after it (the zero Schedule after a delete). A create of a
	// name that exists answers ErrScheduleExists; any other change of a
	// name that does not, ErrScheduleNotFound.
	ChangeSchedule(ctx context.Context, now int64, c state.ScheduleChange) (state.Schedule, error)
	// Schedules returns every schedule, in name order.
	Schedules(ctx context.Context) ([]state.Schedule, error)
	// Schedule returns one schedule, or ErrScheduleNotFound.
	Schedule(ctx context.Context, name string) (state.Schedule, error)
	// Tick deals with the due ticks of every schedule at now (enqueues or
	// skips them, by Plan), each durable before it returns, and reports
	// how many jobs it made and the earliest next tick (ok false: none).
	Tick(ctx context.Context, now int64) (made int, next int64, ok bool, err error)
}
