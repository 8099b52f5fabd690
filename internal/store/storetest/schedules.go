package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/internal/store"
	"github.com/runlog/runlog/retry"
)

// scheduleCases are the cases of durable schedules (store.Scheduler).
var scheduleCases = []struct {
	name string
	run  func(t *testing.T, open Opener)
}{
	{"ScheduleLifecycle", testScheduleLifecycle},
	{"ScheduleTickMakesOneJob", testScheduleTickOnce},
	{"ScheduleCatchUp", testScheduleCatchUp},
	{"ScheduleOverlapSkip", testScheduleOverlap},
	{"SchedulePauseResume", testSchedulePause},
}

func scheduler(t *testing.T, s store.Store) store.Scheduler {
	t.Helper()
	sch, ok := s.(store.Scheduler)
	if !ok {
		t.Fatalf("%T keeps no schedules (it is not a store.Scheduler)", s)
	}
	return sch
}

func everySecond(catchUp state.CatchUp, overlap state.Overlap) *state.ScheduleDef {
	return &state.ScheduleDef{EveryMS: 1000, CatchUp: catchUp, Overlap: overlap,
		Job: state.Spec{Kind: "tick", Target: "t", Payload: []byte("p"), Policy: retry.Policy{Attempts: 2, BaseMS: 100, CapMS: 100}, Queue: "q", Priority: 2}}
}

func change(t *testing.T, s store.Store, now int64, c state.ScheduleChange) state.Schedule {
	t.Helper()
	sc, err := scheduler(t, s).ChangeSchedule(ctx, now, c)
	if err != nil {
		t.Fatalf("ChangeSchedule(%v %q): %v", c.Action, c.Name, err)
	}
	return sc
}

// tick runs Tick at now and checks how many jobs it made and the next tick.
func tick(t *testing.T, s store.Store, now int64, wantMade int, wantNext int64) {
	t.Helper()
	made, next, ok, err := scheduler(t, s).Tick(ctx, now)
	if err != nil {
		t.Fatalf("Tick(%d): %v", now-T0, err)
	}
	if made != wantMade || (wantNext != 0) != ok || ok && next != wantNext {
		t.Fatalf("Tick(T0+%d) made %d jobs, next T0+%d (%v); want %d, next T0+%d", now-T0, made, next-T0, ok, wantMade, wantNext-T0)
	}
}

// scheduled returns the ticks (relative to T0) of the jobs schedule name
// made, oldest first, through List's filter.
func scheduled(t *testing.T, s store.Store, name string) []int64 {
	t.Helper()
	var ticks []int64
	for _, id := range listAll(t, s, store.Filter{Schedule: name, Oldest: true}, 2) {
		j := job(t, s, id)
		if j.Spec.Schedule != name {
			t.Fatalf("List(schedule %q) answered job %d of schedule %q", name, id, j.Spec.Schedule)
		}
		ticks = append(ticks, j.Spec.Tick-T0)
	}
	return ticks
}

func testScheduleLifecycle(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	sch := scheduler(t, s)
	sc := change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "a", Def: everySecond(state.CatchUpLatest, state.OverlapAllow)})
	if sc.Name != "a" || sc.LastTick != T0 || sc.Def.EveryMS != 1000 {
		t.Fatalf("created %+v", sc)
	}
	if n, ok := sc.Next(); !ok || n != T0+1000 {
		t.Fatalf("next tick T0+%d", n-T0)
	}
	_, err := sch.ChangeSchedule(ctx, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "a", Def: everySecond(state.CatchUpAll, state.OverlapAllow)})
	if !errors.Is(err, store.ErrScheduleExists) {
		t.Fatalf("a second create of the name: %v, want ErrScheduleExists", err)
	}
	for _, a := range []state.ScheduleAction{state.SchedUpdate, state.SchedPause, state.SchedResume, state.SchedDelete} {
		c := state.ScheduleChange{Action: a, Name: "nope"}
		if a == state.SchedUpdate {
			c.Def = everySecond(state.CatchUpAll, state.OverlapAllow)
		}
		if _, err := sch.ChangeSchedule(ctx, T0, c); !errors.Is(err, store.ErrScheduleNotFound) {
			t.Fatalf("%v of an unknown schedule: %v, want ErrScheduleNotFound", a, err)
		}
	}
	if _, err := sch.Schedule(ctx, "nope"); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("Schedule(unknown): %v", err)
	}
	change(t, s, T0+10, state.ScheduleChange{Action: state.SchedCreate, Name: "b", Def: &state.ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris", Job: state.Spec{Kind: "nightly", Policy: retry.Policy{Attempts: 1}}}})
	up := everySecond(state.CatchUpAll, state.OverlapSkip)
	up.EveryMS = 5000
	sc = change(t, s, T0+200, state.ScheduleChange{Action: state.SchedUpdate, Name: "a", Def: up})
	if sc.Def.EveryMS != 5000 || sc.Anchor != T0+200 || sc.Def.CatchUp != state.CatchUpAll || sc.CreatedAt != T0 {
		t.Fatalf("updated %+v", sc)
	}
	s.Close()
	s = reopen(t)
	list, err := scheduler(t, s).Schedules(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("Schedules after reopen = %+v, %v", list, err)
	}
	if !sameDef(&list[0].Def, up) || list[1].Def.Zone != "Europe/Paris" || list[1].Def.Cron != "0 3 * * *" {
		t.Fatalf("definitions after reopen: %+v", list)
	}
	if n, _ := list[1].Next(); n != 1_700_013_600_000 { // 2023-11-15T02:00:00Z, 03:00 in Paris (UTC+1)
		t.Fatalf("next tick of the Paris cron: %d", n)
	}
	if sc := change(t, s, T0+300, state.ScheduleChange{Action: state.SchedDelete, Name: "a"}); sc.Name != "" {
		t.Fatalf("delete answered %+v", sc)
	}
	if _, err := scheduler(t, s).Schedule(ctx, "a"); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("deleted schedule: %v", err)
	}
}

func sameDef(a, b *state.ScheduleDef) bool {
	return a.Cron == b.Cron && a.EveryMS == b.EveryMS && a.Zone == b.Zone && a.Overlap == b.Overlap && a.CatchUp == b.CatchUp &&
		a.Job.Kind == b.Job.Kind && a.Job.Target == b.Job.Target && string(a.Job.Payload) == string(b.Job.Payload) &&
		a.Job.Policy == b.Job.Policy && a.Job.Queue == b.Job.Queue && a.Job.Priority == b.Job.Priority && a.Job.TimeoutMS == b.Job.TimeoutMS
}

func testScheduleTickOnce(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "a", Def: everySecond(state.CatchUpLatest, state.OverlapAllow)})
	byHand := enqueueOne(t, s, T0, T0, spec("tick", "t"))
	tick(t, s, T0+999, 0, T0+1000)
	tick(t, s, T0+1000, 1, T0+2000)
	tick(t, s, T0+1000, 0, T0+2000)
	tick(t, s, T0+1500, 0, T0+2000)
	ids := listAll(t, s, store.Filter{Schedule: "a"}, 10)
	if len(ids) != 1 || ids[0] == byHand {
		t.Fatalf("jobs of the schedule: %v (by hand: %d)", ids, byHand)
	}
	j := job(t, s, ids[0])
	want := everySecond(0, 0).Job
	if j.Spec.Schedule != "a" || j.Spec.Tick != T0+1000 || j.Due != T0+1000 || j.Spec.Kind != want.Kind || j.Spec.Target != want.Target || j.Spec.Policy != want.Policy || string(j.Spec.Payload) != "p" {
		t.Fatalf("the tick's job: %+v spec %+v", j, j.Spec)
	}
	// Durable: after a reopen the tick is not made again.
	s.Close()
	s = reopen(t)
	tick(t, s, T0+1999, 0, T0+2000)
	tick(t, s, T0+2000, 1, T0+3000)
	// It runs like any job; a finished job stays listed by its schedule.
	cs := claim(t, s, T0+2000, all)
	if len(cs) != 3 {
		t.Fatalf("claimed %v", ids)
	}
	for _, c := range cs {
		finish(t, s, T0+2001, outcome(c, retry.Success, ""))
	}
	if got := scheduled(t, s, "a"); !slices.Equal(got, []int64{1000, 2000}) {
		t.Fatalf("ticks of the finished jobs: %v", got)
	}
	if got := listAll(t, s, store.Filter{Schedule: "a", State: "succeeded"}, 1); len(got) != 2 {
		t.Fatalf("succeeded jobs of the schedule: %v", got)
	}
	if got := listAll(t, s, store.Filter{Schedule: "zzz"}, 10); len(got) != 0 {
		t.Fatalf("jobs of an unknown schedule: %v", got)
	}
}

func testScheduleCatchUp(t *testing.T, open Opener) {
	s := openDefault(t, open)
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "latest", Def: everySecond(state.CatchUpLatest, state.OverlapAllow)})
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "all", Def: everySecond(state.CatchUpAll, state.OverlapAllow)})
	skip := everySecond(state.CatchUpSkip, state.OverlapAllow)
	skip.EveryMS = 4000
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "skip", Def: skip})
	// Nothing ran for 4.5 s: latest makes tick 4, all makes 1-4, skip makes
	// 4 (0.5 s late is on time).
	tick(t, s, T0+4500, 1+4+1, T0+5000)
	if got := scheduled(t, s, "latest"); !slices.Equal(got, []int64{4000}) {
		t.Fatalf("latest: %v", got)
	}
	if got := scheduled(t, s, "all"); !slices.Equal(got, []int64{1000, 2000, 3000, 4000}) {
		t.Fatalf("all: %v", got)
	}
	// Then 9.5 s: skip's tick 8 s is 1.5 s late: missed, skipped.
	tick(t, s, T0+9500, 1+5, T0+10000)
	if got := scheduled(t, s, "skip"); !slices.Equal(got, []int64{4000}) {
		t.Fatalf("skip: %v", got)
	}
	if sc, _ := scheduler(t, s).Schedule(ctx, "skip"); sc.LastTick != T0+8000 {
		t.Fatalf("skip's last tick T0+%d, want the skipped T0+8000", sc.LastTick-T0)
	}
	if got := scheduled(t, s, "all"); len(got) != 9 || got[8] != 9000 {
		t.Fatalf("all: %v", got)
	}
}

func testScheduleOverlap(t *testing.T, open Opener) {
	s := openDefault(t, open)
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "a", Def: everySecond(state.CatchUpAll, state.OverlapSkip)})
	tick(t, s, T0+1000, 1, T0+2000)
	// The job of tick 1 is pending, then running: ticks 2 and 3 are skipped.
	tick(t, s, T0+2000, 0, T0+3000)
	cs := claim(t, s, T0+2500, all)
	if len(cs) != 1 {
		t.Fatalf("claimed %v", ids(cs))
	}
	tick(t, s, T0+3000, 0, T0+4000)
	finish(t, s, T0+3500, outcome(cs[0], retry.Success, ""))
	tick(t, s, T0+4000, 1, T0+5000)
	if got := scheduled(t, s, "a"); !slices.Equal(got, []int64{1000, 4000}) {
		t.Fatalf("ticks: %v", got)
	}
}

func testSchedulePause(t *testing.T, open Opener) {
	s, reopen := open(t, Config{Circuit: Circuit})
	change(t, s, T0, state.ScheduleChange{Action: state.SchedCreate, Name: "a", Def: everySecond(state.CatchUpAll, state.OverlapAllow)})
	if sc := change(t, s, T0+100, state.ScheduleChange{Action: state.SchedPause, Name: "a"}); !sc.Paused {
		t.Fatalf("paused %+v", sc)
	}
	s.Close()
	s = reopen(t)
	tick(t, s, T0+5000, 0, 0) // paused across the reopen; no other schedule
	sc := change(t, s, T0+5500, state.ScheduleChange{Action: state.SchedResume, Name: "a"})
	if n, _ := sc.Next(); sc.Paused || n != T0+6000 {
		t.Fatalf("resumed %+v next T0+%d: the ticks while paused are skipped", sc, n-T0)
	}
	tick(t, s, T0+6000, 1, T0+7000)
	if got := scheduled(t, s, "a"); !slices.Equal(got, []int64{6000}) {
		t.Fatalf("ticks: %v", got)
	}
}
