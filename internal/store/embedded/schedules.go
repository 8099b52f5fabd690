package embedded

import (
	"context"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
)

var _ store.Scheduler = (*Store)(nil)

// ChangeSchedule implements store.Scheduler: one OpSchedule, journaled.
func (s *Store) ChangeSchedule(ctx context.Context, now int64, c state.ScheduleChange) (state.Schedule, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return state.Schedule{}, err
	}
	_, exists := s.st.Schedule(c.Name)
	switch {
	case c.Action == state.SchedCreate && exists:
		s.mu.Unlock()
		return state.Schedule{}, store.ErrScheduleExists
	case c.Action == state.SchedCreate && s.st.ScheduleCount() >= state.MaxSchedules:
		s.mu.Unlock()
		return state.Schedule{}, store.ErrTooManySchedules
	case c.Action != state.SchedCreate && !exists:
		s.mu.Unlock()
		return state.Schedule{}, store.ErrScheduleNotFound
	}
	wait := s.submitLocked([]state.Op{{Kind: state.OpSchedule, At: now, Sched: &c}})
	var out state.Schedule
	if sc, ok := s.st.Schedule(c.Name); ok {
		out = *sc
	}
	s.mu.Unlock()
	if err := wait(); err != nil {
		return state.Schedule{}, err
	}
	return out, nil
}

// Schedules implements store.Scheduler.
func (s *Store) Schedules(ctx context.Context) ([]state.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return nil, err
	}
	out := make([]state.Schedule, 0, s.st.ScheduleCount())
	s.st.Schedules(func(sc *state.Schedule) bool { out = append(out, *sc); return true })
	return out, nil
}

// Schedule implements store.Scheduler.
func (s *Store) Schedule(ctx context.Context, name string) (state.Schedule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.readableLocked(); err != nil {
		return state.Schedule{}, err
	}
	sc, ok := s.st.Schedule(name)
	if !ok {
		return state.Schedule{}, store.ErrScheduleNotFound
	}
	return *sc, nil
}

// Tick implements store.Scheduler: the ops of every schedule's plan at now
// in one journal write, each tick's job one OpEnqueue that also advances
// its schedule.
func (s *Store) Tick(ctx context.Context, now int64) (int, int64, bool, error) {
	s.mu.Lock()
	if err := s.usableLocked(); err != nil {
		s.mu.Unlock()
		return 0, 0, false, err
	}
	var ops []state.Op
	made := 0
	s.st.Schedules(func(sc *state.Schedule) bool {
		if next, ok := sc.Next(); !ok || next > now || sc.Paused {
			return true
		}
		tick := s.st.TickOps(sc, now, s.st.NextID())
		for i := range tick {
			// Applied one by one: the next schedule's ids follow, and its
			// overlap rule sees this one's job.
			s.applyLocked(&tick[i], s.appended+uint64(len(ops))+1)
			if tick[i].Kind == state.OpEnqueue {
				made++
			}
			ops = append(ops, tick[i])
		}
		return true
	})
	next, ok := s.st.NextTick()
	wait := s.journalLocked(ops)
	s.mu.Unlock()
	if err := wait(); err != nil {
		return 0, 0, false, err
	}
	return made, next, ok, nil
}
