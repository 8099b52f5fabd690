package state

import (
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/retry"
)

func ms(t *testing.T, s string) int64 {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UnixMilli()
}

func rfc(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// TestNextTicks pins the ticks of cron expressions in time zones, across
// both daylight-saving changes, and of intervals.
func TestNextTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		def   ScheduleDef
		from  string
		ticks []string
	}{
		{"utc daily", ScheduleDef{Cron: "0 3 * * *"}, "2026-01-10T03:00:00Z",
			[]string{"2026-01-11T03:00:00Z", "2026-01-12T03:00:00Z"}},
		{"paris winter", ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris"}, "2026-01-10T00:00:00Z",
			[]string{"2026-01-10T02:00:00Z", "2026-01-11T02:00:00Z"}},
		// Clocks go forward at 02:00 on 29 March: 02:30 does not exist
		// that day, so it does not tick; 03:00 does, an hour earlier in UTC.
		{"paris spring gap", ScheduleDef{Cron: "30 2 * * *", Zone: "Europe/Paris"}, "2026-03-28T12:00:00Z",
			[]string{"2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		{"paris spring 03:00", ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris"}, "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"}},
		// Clocks go back at 03:00 on 25 October: 02:30 happens twice and
		// ticks once, at its first occurrence.
		{"paris autumn repeat", ScheduleDef{Cron: "30 2 * * *", Zone: "Europe/Paris"}, "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"}},
		// Every hour: the repeated hour is a real hour and ticks.
		{"paris autumn hourly", ScheduleDef{Cron: "0 * * * *", Zone: "Europe/Paris"}, "2026-10-24T23:30:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{"new york", ScheduleDef{Cron: "0 9 * * 1-5", Zone: "America/New_York"}, "2026-03-06T12:00:00Z",
			[]string{"2026-03-06T14:00:00Z", "2026-03-09T13:00:00Z"}},
		{"seconds field", ScheduleDef{Cron: "*/15 * * * * *"}, "2026-01-01T00:00:07Z",
			[]string{"2026-01-01T00:00:15Z", "2026-01-01T00:00:30Z"}},
		{"descriptor", ScheduleDef{Cron: "@hourly"}, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z"}},
		{"every from anchor", ScheduleDef{EveryMS: 90_000}, "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z", "2026-01-01T00:04:30Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sc := newSchedule("s", c.def, ms(t, c.from))
			if sc.tk == nil {
				t.Fatalf("definition %+v does not compile", c.def)
			}
			var got []string
			for _, tk := range sc.NextTicks(len(c.ticks)) {
				got = append(got, rfc(tk))
			}
			if strings.Join(got, " ") != strings.Join(c.ticks, " ") {
				t.Errorf("ticks\n got %v\nwant %v", got, c.ticks)
			}
		})
	}
}

// TestScheduleDefValidate: every bad definition is refused with a message
// that says what to change.
func TestScheduleDefValidate(t *testing.T) {
	t.Parallel()
	job := Spec{Kind: "k", Policy: retry.Policy{Attempts: 1}}
	for _, c := range []struct {
		def  ScheduleDef
		want string // "" = valid
	}{
		{ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris", Job: job}, ""},
		{ScheduleDef{EveryMS: 1000, Job: job}, ""},
		{ScheduleDef{Job: job}, "give cron"},
		{ScheduleDef{Cron: "* * * * *", EveryMS: 1000, Job: job}, "not both"},
		{ScheduleDef{EveryMS: 999, Job: job}, "from 1s"},
		{ScheduleDef{EveryMS: MaxEveryMS + 1, Job: job}, "from 1s"},
		{ScheduleDef{EveryMS: 1000, Zone: "UTC", Job: job}, "no time zone"},
		{ScheduleDef{Cron: "61 * * * *", Job: job}, "cron \"61 * * * *\""},
		{ScheduleDef{Cron: "* * *", Job: job}, "five fields"},
		{ScheduleDef{Cron: "@every 1s", Job: job}, "every field"},
		{ScheduleDef{Cron: "CRON_TZ=UTC * * * * *", Job: job}, "timezone field"},
		{ScheduleDef{Cron: "0 3 * * *", Zone: "Mars/Olympus", Job: job}, "not a known IANA"},
		{ScheduleDef{Cron: "0 3 * * *", Zone: "Local", Job: job}, "IANA zone"},
		{ScheduleDef{Cron: strings.Repeat("1", 201), Job: job}, "at most"},
		{ScheduleDef{EveryMS: 1000}, "no kind"},
		{ScheduleDef{EveryMS: 1000, Job: Spec{Kind: "k", Key: "x"}}, "idempotency key"},
	} {
		err := c.def.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.def, err, c.want)
		}
	}
	for name, ok := range map[string]bool{"nightly": true, "a.b_c-9": true, "9": true, "": false, "-x": false,
		"a b": false, "é": false, strings.Repeat("a", 64): true, strings.Repeat("a", 65): false, "a/b": false} {
		if err := ValidScheduleName(name); (err == nil) != ok {
			t.Errorf("ValidScheduleName(%q) = %v", name, err)
		}
	}
}

// TestPlan pins the tick rule: catch-up and overlap, paused.
func TestPlan(t *testing.T) {
	t.Parallel()
	const s = 1000
	base := ms(t, "2026-01-01T00:00:00Z")
	for _, c := range []struct {
		name       string
		catchUp    CatchUp
		overlap    Overlap
		paused     bool
		lastTick   int64 // relative to base (the anchor)
		now        int64 // relative to base
		unfinished bool
		ticks      []int64 // relative
		skip       int64   // relative, -1 none
	}{
		{"nothing due", CatchUpLatest, OverlapAllow, false, 0, 999, false, nil, -1},
		{"on time", CatchUpLatest, OverlapAllow, false, 0, 1000, false, []int64{1 * s}, -1},
		{"latest after outage", CatchUpLatest, OverlapAllow, false, 0, 5500, false, []int64{5 * s}, -1},
		{"all after outage", CatchUpAll, OverlapAllow, false, 0, 3500, false, []int64{1 * s, 2 * s, 3 * s}, -1},
		{"all bounded", CatchUpAll, OverlapAllow, false, 0, (CatchUpAllMax + 50) * s, false, nil, -1},
		{"skip on time", CatchUpSkip, OverlapAllow, false, 0, 5000 + LateGraceMS - 1, false, []int64{5 * s}, -1},
		{"skip late", CatchUpSkip, OverlapAllow, false, 0, 5000 + LateGraceMS + 1, false, nil, 5 * s},
		{"overlap skip unfinished", CatchUpAll, OverlapSkip, false, 0, 3000, true, nil, 3 * s},
		{"overlap skip finished", CatchUpLatest, OverlapSkip, false, 0, 3000, false, []int64{3 * s}, -1},
		{"overlap allow unfinished", CatchUpLatest, OverlapAllow, false, 0, 3000, true, []int64{3 * s}, -1},
		{"paused", CatchUpAll, OverlapAllow, true, 0, 3000, false, nil, -1},
		{"after last tick", CatchUpAll, OverlapAllow, false, 2 * s, 3000, false, []int64{3 * s}, -1},
	} {
		every := int64(s)
		if c.catchUp == CatchUpSkip {
			every = 5 * s // a tick can be more than LateGraceMS late only if the interval is longer
		}
		sc := newSchedule("s", ScheduleDef{EveryMS: every, CatchUp: c.catchUp, Overlap: c.overlap, Job: Spec{Kind: "k"}}, base)
		sc.LastTick, sc.Paused = base+c.lastTick, c.paused
		p := sc.Plan(base+c.now, c.unfinished)
		if c.name == "all bounded" {
			if len(p.Ticks) != CatchUpAllMax || p.Ticks[0] != base+51*s || p.Ticks[len(p.Ticks)-1] != base+(CatchUpAllMax+50)*s {
				t.Errorf("%s: %d ticks from %d, want the latest %d", c.name, len(p.Ticks), p.Ticks[0]-base, CatchUpAllMax)
			}
			continue
		}
		var got []int64
		for _, tk := range p.Ticks {
			got = append(got, tk-base)
		}
		skip := int64(-1)
		if p.Skip != 0 {
			skip = p.Skip - base
		}
		if fmt.Sprint(got) != fmt.Sprint(c.ticks) || skip != c.skip {
			t.Errorf("%s: ticks %v skip %d, want %v skip %d", c.name, got, skip, c.ticks, c.skip)
		}
	}
}

// TestLatestLooksBackBriefly: after a long outage, the latest tick of a
// one-second cron is found without walking every tick since.
func TestLatestLooksBackBriefly(t *testing.T) {
	t.Parallel()
	sc := newSchedule("s", ScheduleDef{Cron: "* * * * * *", Job: Spec{Kind: "k"}}, ms(t, "2025-01-01T00:00:00Z"))
	now := ms(t, "2026-01-01T00:00:00Z") + 500
	p := sc.Plan(now, false)
	if len(p.Ticks) != 1 || p.Ticks[0] != now-500 {
		t.Fatalf("plan after a year: %+v", p)
	}
}

// TestScheduleApply: the ops move a schedule as the doc says, and a tick's
// enqueue advances it in the same op.
func TestScheduleApply(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	def := &ScheduleDef{EveryMS: 1000, Job: Spec{Kind: "k", Policy: retry.Policy{Attempts: 1}}}
	change := func(at int64, c ScheduleChange) { s.Apply(&Op{Kind: OpSchedule, At: at, Sched: &c}) }
	change(10_000, ScheduleChange{Action: SchedCreate, Name: "a", Def: def})
	change(10_500, ScheduleChange{Action: SchedCreate, Name: "a", Def: &ScheduleDef{EveryMS: 5000, Job: Spec{Kind: "x"}}}) // exists: no-op
	sc, ok := s.Schedule("a")
	if !ok || sc.Def.EveryMS != 1000 || sc.LastTick != 10_000 {
		t.Fatalf("after create: %+v", sc)
	}
	if n, _ := sc.Next(); n != 11_000 {
		t.Fatalf("next %d", n)
	}
	ops := s.TickOps(sc, 12_300, s.NextID())
	if len(ops) != 1 || ops[0].Spec.Tick != 12_000 || ops[0].Spec.Schedule != "a" || ops[0].Due != 12_000 {
		t.Fatalf("tick ops %+v", ops)
	}
	s.Apply(&ops[0])
	if sc.LastTick != 12_000 || sc.LastJob != ops[0].ID {
		t.Fatalf("after the tick's enqueue: %+v", sc)
	}
	if again := s.TickOps(sc, 12_300, s.NextID()); len(again) != 0 {
		t.Fatalf("the same tick again: %+v", again)
	}
	change(12_400, ScheduleChange{Action: SchedPause, Name: "a"})
	if ops := s.TickOps(sc, 20_000, s.NextID()); len(ops) != 0 || !sc.Paused {
		t.Fatalf("paused schedule ticks: %+v", ops)
	}
	change(20_500, ScheduleChange{Action: SchedResume, Name: "a"})
	if n, _ := sc.Next(); sc.Paused || n != 21_000 {
		t.Fatalf("after resume: next %d, %+v (ticks while paused are skipped)", n, sc)
	}
	change(20_600, ScheduleChange{Action: SchedSkip, Name: "a", Tick: 23_000})
	if sc.LastTick != 23_000 {
		t.Fatalf("skip: %+v", sc)
	}
	change(20_700, ScheduleChange{Action: SchedUpdate, Name: "a", Def: &ScheduleDef{EveryMS: 60_000, Job: Spec{Kind: "k"}}})
	sc, _ = s.Schedule("a")
	if n, _ := sc.Next(); sc.Anchor != 20_700 || sc.LastTick != 23_000 || n != 80_700 || sc.LastJob != ops[0].ID {
		t.Fatalf("after update: next %d, %+v", n, sc)
	}
	body := s.AppendSnapshot(nil)
	r, err := FromSnapshot(Config{}, body)
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := s.Equal(r); !ok {
		t.Fatalf("snapshot with a schedule: %s", diff)
	}
	change(30_000, ScheduleChange{Action: SchedDelete, Name: "a"})
	if _, ok := s.Schedule("a"); ok || s.ScheduleCount() != 0 {
		t.Fatal("delete left the schedule")
	}
	if _, ok := s.Job(ops[0].ID); !ok {
		t.Fatal("delete dropped the schedule's job")
	}
}

// TestScheduleCountBounded: a create beyond MaxSchedules is a no-op.
func TestScheduleCountBounded(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	def := &ScheduleDef{EveryMS: 1000, Job: Spec{Kind: "k"}}
	for i := range MaxSchedules + 1 {
		s.Apply(&Op{Kind: OpSchedule, At: 1, Sched: &ScheduleChange{Action: SchedCreate, Name: "s" + time.Duration(i).String(), Def: def}})
	}
	if s.ScheduleCount() != MaxSchedules {
		t.Fatalf("%d schedules, bound %d", s.ScheduleCount(), MaxSchedules)
	}
}

// scheduledState is a state with two schedules, one of which made a job.
func scheduledState() *State {
	s := New(Config{Circuit: retry.DefaultCircuit()})
	s.Apply(&Op{Kind: OpSchedule, At: 1700000000000, Sched: &ScheduleChange{Action: SchedCreate, Name: "nightly",
		Def: &ScheduleDef{Cron: "0 3 * * *", Zone: "Europe/Paris", Overlap: OverlapSkip,
			Job: Spec{Kind: "report", Payload: []byte("{}"), Policy: retry.Policy{Attempts: 2}, Queue: "bulk", Priority: 3}}}})
	s.Apply(&Op{Kind: OpSchedule, At: 1700000000000, Sched: &ScheduleChange{Action: SchedCreate, Name: "every.1s",
		Def: &ScheduleDef{EveryMS: 1000, CatchUp: CatchUpAll, Job: Spec{Kind: "ping", Policy: retry.Policy{Attempts: 1}}}}})
	sc, _ := s.Schedule("every.1s")
	for _, op := range s.TickOps(sc, 1700000001200, s.NextID()) {
		s.Apply(&op)
	}
	s.Apply(&Op{Kind: OpSchedule, At: 1700000001300, Sched: &ScheduleChange{Action: SchedPause, Name: "nightly"}})
	return s
}

// TestSnapshotSchedulesGolden pins the bytes of a snapshot with the
// schedules' section (version 3, section 3), and reads them back.
func TestSnapshotSchedulesGolden(t *testing.T) {
	t.Parallel()
	got := hex.EncodeToString(scheduledState().AppendSnapshot(nil))
	path := filepath.Join("testdata", "snapshot-schedules.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestSnapshotSchedulesGolden -update to write it)", err)
	}
	if strings.TrimSpace(string(want)) != got {
		t.Fatalf("the snapshot of schedules changed:\n got %s\nwant %s", got, want)
	}
	b, _ := hex.DecodeString(strings.TrimSpace(string(want)))
	r, err := FromSnapshot(Config{Circuit: retry.DefaultCircuit()}, b)
	if err != nil {
		t.Fatal(err)
	}
	if ok, diff := scheduledState().Equal(r); !ok {
		t.Fatal(diff)
	}
	sc, _ := r.Schedule("every.1s")
	if sc.LastTick != 1700000001000 || sc.LastJob != 1 {
		t.Fatalf("restored schedule %+v", sc)
	}
}
