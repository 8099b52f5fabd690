package state

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedules: durable periodic jobs.
//
// A schedule has a definition (ScheduleDef: a cron expression in a time
// zone, or a fixed interval; the template of the jobs it makes; its overlap
// and catch-up rules) and a position: LastTick, the latest tick it has
// dealt with (made a job for, or skipped). The ticks it will make a job for
// are the ticks after LastTick. Each tick's job is one OpEnqueue whose Spec
// names the schedule and the tick, and applying it advances LastTick to the
// tick: the job and the advance are one journal record, so a crash cannot
// split them, and a tick at or before LastTick is never enqueued again.
// Every other change is one OpSchedule (create, update, pause, resume,
// delete, skip a tick).
//
// Plan is the tick rule, the one both stores call: given the schedule and
// the time, which ticks to enqueue and which to skip.

// The bounds of a schedule.
const (
	// MaxSchedules bounds how many schedules a store keeps.
	MaxSchedules = 1000
	// MaxScheduleName bounds a schedule's name, in bytes.
	MaxScheduleName = 64
	// MinEveryMS is the shortest interval of an "every" schedule.
	MinEveryMS = 1000
	// MaxEveryMS is the longest interval of an "every" schedule (a year).
	MaxEveryMS = 366 * 24 * 3600 * 1000
	// CatchUpAllMax bounds how many missed ticks CatchUpAll enqueues at
	// once: the latest ones; older missed ticks are skipped.
	CatchUpAllMax = 100
	// LateGraceMS is how late a tick may be noticed and still be on time
	// under CatchUpSkip: a tick noticed later was missed.
	LateGraceMS = 1000
	// maxCronLen bounds a cron expression, in bytes.
	maxCronLen = 200
)

// Overlap says what a tick does while the schedule's previous job is
// unfinished (pending or running).
type Overlap uint8

// The overlap rules. The values are part of the record format.
const (
	// OverlapAllow makes the tick's job anyway (the default).
	OverlapAllow Overlap = 0
	// OverlapSkip skips the tick: no job is made for it.
	OverlapSkip Overlap = 1
)

// CatchUp says which of the ticks missed while nothing ran are enqueued
// when the schedule is looked at again.
type CatchUp uint8

// The catch-up rules. The values are part of the record format.
const (
	// CatchUpLatest enqueues the latest due tick once and skips the older
	// ones (the default).
	CatchUpLatest CatchUp = 0
	// CatchUpSkip enqueues the latest due tick only if it is at most
	// LateGraceMS late, and skips every other one.
	CatchUpSkip CatchUp = 1
	// CatchUpAll enqueues every due tick, oldest first, up to the latest
	// CatchUpAllMax of them.
	CatchUpAll CatchUp = 2
)

// String returns "allow" or "skip".
func (o Overlap) String() string {
	if o == OverlapSkip {
		return "skip"
	}
	return "allow"
}

// String returns "latest", "skip" or "all".
func (c CatchUp) String() string {
	switch c {
	case CatchUpSkip:
		return "skip"
	case CatchUpAll:
		return "all"
	}
	return "latest"
}

// ParseOverlap reads an overlap rule by name; "" is the default, allow.
func ParseOverlap(s string) (Overlap, error) {
	switch s {
	case "", "allow":
		return OverlapAllow, nil
	case "skip":
		return OverlapSkip, nil
	}
	return 0, fmt.Errorf("overlap %q: use \"skip\" or \"allow\"", s)
}

// ParseCatchUp reads a catch-up rule by name; "" is the default, latest.
func ParseCatchUp(s string) (CatchUp, error) {
	switch s {
	case "", "latest":
		return CatchUpLatest, nil
	case "skip":
		return CatchUpSkip, nil
	case "all":
		return CatchUpAll, nil
	}
	return 0, fmt.Errorf("catch_up %q: use \"skip\", \"latest\" or \"all\"", s)
}

// ScheduleDef is what a schedule is: when it ticks and what each tick makes.
type ScheduleDef struct {
	// Cron is a cron expression: five fields (minute hour day-of-month
	// month day-of-week), or six with seconds first, or a descriptor such
	// as @daily. "" when EveryMS is set.
	Cron string
	// EveryMS is a fixed interval in ms (at least MinEveryMS); the ticks
	// are the schedule's anchor plus whole intervals. 0 when Cron is set.
	EveryMS int64
	// Zone is the IANA time zone the cron expression is read in; "" is
	// UTC. An interval schedule has none.
	Zone string
	// Job is the template of the jobs the schedule makes; its Schedule,
	// Tick and Key are empty.
	Job Spec
	// Overlap and CatchUp are the schedule's rules.
	Overlap Overlap
	CatchUp CatchUp
}

// ValidScheduleName reports what is wrong with a schedule's name, or nil:
// 1 to MaxScheduleName bytes of letters, digits, '.', '_' and '-', starting
// with a letter or digit.
func ValidScheduleName(name string) error {
	if name == "" || len(name) > MaxScheduleName {
		return fmt.Errorf("schedule name %q: give 1 to %d characters", name, MaxScheduleName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return fmt.Errorf("schedule name %q: use letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	return nil
}

// cronParser reads cron expressions: an optional seconds field, then the
// five standard fields, or a descriptor (@hourly, @daily, ...).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ticker computes a definition's ticks.
type ticker struct {
	cron  cron.Schedule
	loc   *time.Location
	every int64
}

// compile checks d and returns its ticker, or an error that says what to
// change.
func (d *ScheduleDef) compile() (*ticker, error) {
	switch {
	case d.Cron != "" && d.EveryMS != 0:
		return nil, fmt.Errorf("give either cron or every, not both")
	case d.Cron == "" && d.EveryMS == 0:
		return nil, fmt.Errorf("give cron (such as \"0 3 * * *\") or every (such as \"1m\")")
	case d.EveryMS != 0:
		if d.EveryMS < MinEveryMS || d.EveryMS > MaxEveryMS {
			return nil, fmt.Errorf("every %v: give an interval from 1s to %v", time.Duration(d.EveryMS)*time.Millisecond, time.Duration(MaxEveryMS)*time.Millisecond)
		}
		if d.Zone != "" {
			return nil, fmt.Errorf("timezone %q: an every schedule has no time zone; drop it, or use cron", d.Zone)
		}
		return &ticker{every: d.EveryMS}, nil
	}
	if len(d.Cron) > maxCronLen {
		return nil, fmt.Errorf("cron expression of %d bytes: at most %d", len(d.Cron), maxCronLen)
	}
	if strings.HasPrefix(d.Cron, "@every") {
		return nil, fmt.Errorf("cron %q: use the schedule's every field for an interval", d.Cron)
	}
	if strings.Contains(d.Cron, "TZ=") {
		return nil, fmt.Errorf("cron %q: give the time zone in the schedule's timezone field", d.Cron)
	}
	c, err := cronParser.Parse(d.Cron)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v (five fields: minute hour day-of-month month day-of-week, such as \"0 3 * * *\")", d.Cron, err)
	}
	loc := time.UTC
	if d.Zone != "" {
		if strings.EqualFold(d.Zone, "local") {
			return nil, fmt.Errorf("timezone %q: name an IANA zone such as \"Europe/Paris\"", d.Zone)
		}
		if loc, err = time.LoadLocation(d.Zone); err != nil {
			return nil, fmt.Errorf("timezone %q: not a known IANA time zone (such as \"Europe/Paris\" or \"UTC\")", d.Zone)
		}
	}
	return &ticker{cron: c, loc: loc}, nil
}

// Validate reports what is wrong with d, or nil.
func (d *ScheduleDef) Validate() error {
	if _, err := d.compile(); err != nil {
		return err
	}
	if d.Job.Kind == "" {
		return fmt.Errorf("the schedule's job has no kind")
	}
	if d.Job.Key != "" {
		return fmt.Errorf("the schedule's job has an idempotency key: each tick makes its own job (the tick is its key); drop the key")
	}
	if d.Job.Schedule != "" || d.Job.Tick != 0 {
		return fmt.Errorf("the schedule's job template names a schedule or tick: they are set per tick")
	}
	if d.Overlap > OverlapSkip || d.CatchUp > CatchUpAll {
		return fmt.Errorf("overlap %d or catch-up %d out of range", d.Overlap, d.CatchUp)
	}
	return nil
}

// next returns the first tick strictly after t (ms), with anchor the
// interval schedule's origin; false when there is none (a cron expression
// that matches no date).
func (tk *ticker) next(anchor, t int64) (int64, bool) {
	if tk.every > 0 {
		if t < anchor {
			return anchor + tk.every, true
		}
		return anchor + ((t-anchor)/tk.every+1)*tk.every, true
	}
	// Cron ticks fall on whole seconds: the next one after t is the first
	// whole second after t that matches. When clocks go back, a wall time
	// of an expression with fixed hours ticks once, at its first
	// occurrence (as cron does); a wall time that clocks skip when they go
	// forward does not tick.
	at := time.UnixMilli(t).In(tk.loc)
	for range 4 {
		n := tk.cron.Next(at)
		if n.IsZero() {
			return 0, false
		}
		if !tk.repeat(n) {
			return n.UnixMilli(), true
		}
		at = n
	}
	return 0, false
}

// repeat reports whether n is the second occurrence of its wall time (the
// clocks went back) in an expression whose hours are fixed.
func (tk *ticker) repeat(n time.Time) bool {
	if sp, ok := tk.cron.(*cron.SpecSchedule); !ok || sp.Hour&(1<<63) != 0 {
		return false // every hour: the repeated hour's ticks are real hours
	}
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		m := n.Add(-back)
		if m.Hour() == n.Hour() && m.Minute() == n.Minute() && m.Second() == n.Second() && m.Day() == n.Day() {
			return true
		}
	}
	return false
}

// latest returns up to n of the latest ticks in (after, now], oldest
// first. It looks back from now over a window that doubles until the
// window holds n ticks or reaches after, so that a long outage does not
// walk every tick since.
func (tk *ticker) latest(anchor, after, now int64, n int) []int64 {
	if now <= after {
		return nil
	}
	for w := int64(1000); ; w *= 2 {
		from := max(after, now-w)
		var ts []int64
		for t := from; ; {
			nt, ok := tk.next(anchor, t)
			if !ok || nt > now {
				break
			}
			if len(ts) == n {
				ts = append(ts[:0], ts[1:]...)
			}
			ts = append(ts, nt)
			t = nt
		}
		if len(ts) == n || from == after {
			return ts
		}
	}
}

// Schedule is one schedule in the state: its definition and position. It
// is a read-only view for callers.
type Schedule struct {
	Name string
	Def  ScheduleDef
	// Anchor is when the definition took effect (created or updated), in
	// ms: the origin of an interval's ticks.
	Anchor int64
	// LastTick is the latest tick dealt with: ticks at or before it are
	// never enqueued. It starts at Anchor.
	LastTick int64
	// LastJob is the id of the latest job a tick made (0 for none).
	LastJob uint64
	// Paused: no tick is dealt with while set; resuming skips the ticks
	// that came due while paused.
	Paused bool
	// CreatedAt is when the schedule was created, in ms.
	CreatedAt int64

	tk *ticker // nil when the definition no longer compiles (a zone this host lacks)
}

// Next returns the schedule's next tick: the first after LastTick; false
// when it has none (its cron expression matches no date, or its time zone
// is unknown on this host).
func (sc *Schedule) Next() (int64, bool) {
	if sc.tk == nil {
		return 0, false
	}
	return sc.tk.next(sc.Anchor, sc.LastTick)
}

// NextTicks returns up to n ticks after LastTick, in order.
func (sc *Schedule) NextTicks(n int) []int64 {
	var ts []int64
	t := sc.LastTick
	for sc.tk != nil && len(ts) < n {
		nt, ok := sc.tk.next(sc.Anchor, t)
		if !ok {
			break
		}
		ts, t = append(ts, nt), nt
	}
	return ts
}

// TickPlan is what a schedule does when looked at: enqueue Ticks (oldest
// first, one job each), or skip every due tick up to Skip (no job; 0 when
// nothing is skipped). At most one of the two is set.
type TickPlan struct {
	Ticks []int64
	Skip  int64
}

// Plan is the tick rule: what the schedule does at now, given whether the
// job its previous tick made is still unfinished. A paused schedule, or one
// with no tick due (after LastTick, at or before now), does nothing. Of the
// due ticks, the catch-up rule picks which to enqueue (CatchUpLatest: the
// latest; CatchUpSkip: the latest if at most LateGraceMS late, else none;
// CatchUpAll: each of the latest CatchUpAllMax); the others are skipped.
// With OverlapSkip and the previous job unfinished, every due tick is
// skipped. Enqueueing a tick advances LastTick to it; so does a skip.
func (sc *Schedule) Plan(now int64, prevUnfinished bool) TickPlan {
	if sc.Paused || sc.tk == nil {
		return TickPlan{}
	}
	n := 1
	if sc.Def.CatchUp == CatchUpAll {
		n = CatchUpAllMax
	}
	due := sc.tk.latest(sc.Anchor, sc.LastTick, now, n)
	if len(due) == 0 {
		return TickPlan{}
	}
	last := due[len(due)-1]
	if sc.Def.Overlap == OverlapSkip && prevUnfinished {
		return TickPlan{Skip: last}
	}
	if sc.Def.CatchUp == CatchUpSkip && now-last > LateGraceMS {
		return TickPlan{Skip: last}
	}
	if sc.Def.CatchUp == CatchUpAll {
		return TickPlan{Ticks: due}
	}
	return TickPlan{Ticks: []int64{last}}
}

// newSchedule returns the schedule name with definition def taking effect
// at at.
func newSchedule(name string, def ScheduleDef, at int64) *Schedule {
	tk, _ := def.compile()
	return &Schedule{Name: name, Def: def, Anchor: at, LastTick: at, CreatedAt: at, tk: tk}
}

// ScheduleAction is what an OpSchedule does.
type ScheduleAction uint8

// The schedule actions. The values are part of the record format.
const (
	// SchedCreate adds the schedule Name with Def, unless one has that
	// name or MaxSchedules exist.
	SchedCreate ScheduleAction = iota + 1
	// SchedUpdate replaces the definition of Name with Def, from At: the
	// anchor moves to At and ticks up to At are not enqueued.
	SchedUpdate
	// SchedPause pauses Name.
	SchedPause
	// SchedResume resumes Name; the ticks up to At are skipped.
	SchedResume
	// SchedDelete removes Name (the jobs it made stay).
	SchedDelete
	// SchedSkip advances Name's LastTick to Tick without a job.
	SchedSkip
)

// String returns the action's name.
func (a ScheduleAction) String() string {
	switch a {
	case SchedCreate:
		return "create"
	case SchedUpdate:
		return "update"
	case SchedPause:
		return "pause"
	case SchedResume:
		return "resume"
	case SchedDelete:
		return "delete"
	case SchedSkip:
		return "skip"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ScheduleChange is the body of an OpSchedule.
type ScheduleChange struct {
	Action ScheduleAction
	Name   string
	// Def is the definition, for SchedCreate and SchedUpdate only.
	Def *ScheduleDef
	// Tick is the tick skipped up to, for SchedSkip only.
	Tick int64
}

// schedule applies an OpSchedule. A change that does not fit the state (a
// create of a name that exists, any other of a name that does not) is a
// no-op.
func (s *State) schedule(op *Op) {
	c := op.Sched
	if c == nil {
		return
	}
	sc := s.schedules[c.Name]
	if c.Action == SchedCreate {
		if sc != nil || c.Def == nil || len(s.schedules) >= MaxSchedules {
			return
		}
		if s.schedules == nil {
			s.schedules = make(map[string]*Schedule)
		}
		s.schedules[c.Name] = newSchedule(c.Name, *c.Def, op.At)
		return
	}
	if sc == nil {
		return
	}
	switch c.Action {
	case SchedUpdate:
		if c.Def != nil {
			n := newSchedule(c.Name, *c.Def, op.At)
			n.LastTick, n.LastJob, n.Paused, n.CreatedAt = max(sc.LastTick, op.At), sc.LastJob, sc.Paused, sc.CreatedAt
			s.schedules[c.Name] = n
		}
	case SchedPause:
		sc.Paused = true
	case SchedResume:
		sc.Paused = false
		sc.LastTick = max(sc.LastTick, op.At)
	case SchedDelete:
		delete(s.schedules, c.Name)
	case SchedSkip:
		sc.LastTick = max(sc.LastTick, c.Tick)
	}
}

// scheduleTick advances the schedule whose tick made job j (just enqueued).
func (s *State) scheduleTick(j *Job) {
	if sc := s.schedules[j.Spec.Schedule]; sc != nil && j.Spec.Tick > sc.LastTick {
		sc.LastTick, sc.LastJob = j.Spec.Tick, j.ID
	}
}

// Schedule returns the schedule name, a read-only view.
func (s *State) Schedule(name string) (*Schedule, bool) {
	sc, ok := s.schedules[name]
	return sc, ok
}

// Schedules calls fn on every schedule in name order until it returns
// false.
func (s *State) Schedules(fn func(*Schedule) bool) {
	for _, name := range slices.Sorted(maps.Keys(s.schedules)) {
		if !fn(s.schedules[name]) {
			return
		}
	}
}

// ScheduleCount returns how many schedules the state holds.
func (s *State) ScheduleCount() int { return len(s.schedules) }

// Unfinished reports whether job id is pending or running (a job the
// state no longer holds has finished).
func (s *State) Unfinished(id uint64) bool {
	j := s.job(id)
	return j != nil && !j.State.Finished()
}

// putScheduleDef appends a definition: string cron, varint every, string
// zone, byte overlap, byte catch-up, the job's spec (as an enqueue holds
// it) and a byte 1 followed by its extension block when it has one, else 0.
func putScheduleDef(dst []byte, d *ScheduleDef) []byte {
	dst = putString(dst, d.Cron)
	dst = putVarint(dst, d.EveryMS)
	dst = putString(dst, d.Zone)
	dst = append(dst, byte(d.Overlap), byte(d.CatchUp))
	dst = putSpec(dst, &d.Job)
	if d.Job.HasExt() {
		return putSpecExt(append(dst, 1), &d.Job)
	}
	return append(dst, 0)
}

// scheduleDef reads what putScheduleDef wrote, refusing a definition that
// does not validate here (its time zone unknown to this host aside).
func (d *decoder) scheduleDef() *ScheduleDef {
	def := &ScheduleDef{Cron: d.string("cron"), EveryMS: d.varint("every"), Zone: d.string("zone")}
	def.Overlap, def.CatchUp = Overlap(d.byte("overlap")), CatchUp(d.byte("catch-up"))
	d.spec(&def.Job)
	switch d.byte("job extension") {
	case 0:
	case 1:
		d.specExt(&def.Job)
	default:
		d.failAt("bad job extension flag")
	}
	if d.err == nil {
		if err := def.Validate(); err != nil && !strings.HasPrefix(err.Error(), "timezone") {
			d.failAt("schedule definition: %v", err)
		}
	}
	return def
}

// spec reads what putSpec wrote into sp.
func (d *decoder) spec(sp *Spec) {
	sp.Kind = d.string("job kind")
	sp.Target = d.string("target")
	sp.Payload = d.bytes("payload")
	sp.Key = d.string("key")
	attempts := d.varint("attempts")
	if d.err == nil && (attempts < -1<<31 || attempts > 1<<31-1) {
		d.failAt("attempts %d out of range", attempts)
	}
	sp.Policy.Attempts = int(attempts)
	sp.Policy.BaseMS = d.varint("base")
	sp.Policy.CapMS = d.varint("cap")
	sp.Policy.DeadlineMS = d.varint("deadline")
	sp.TimeoutMS = d.varint("timeout")
}

// putScheduleChange appends an OpSchedule's body: byte action, string
// name, then for create and update the definition, for skip varint tick.
func putScheduleChange(dst []byte, c *ScheduleChange) []byte {
	if c == nil {
		c = &ScheduleChange{}
	}
	dst = append(dst, byte(c.Action))
	dst = putString(dst, c.Name)
	switch c.Action {
	case SchedCreate, SchedUpdate:
		def := c.Def
		if def == nil {
			def = &ScheduleDef{}
		}
		dst = putScheduleDef(dst, def)
	case SchedSkip:
		dst = putVarint(dst, c.Tick)
	}
	return dst
}

// scheduleChange reads what putScheduleChange wrote.
func (d *decoder) scheduleChange() *ScheduleChange {
	c := &ScheduleChange{Action: ScheduleAction(d.byte("schedule action"))}
	if d.err == nil && (c.Action < SchedCreate || c.Action > SchedSkip) {
		d.failAt("unknown schedule action %d", c.Action)
		return nil
	}
	c.Name = d.string("schedule name")
	if d.err == nil {
		if err := ValidScheduleName(c.Name); err != nil {
			d.failAt("%v", err)
		}
	}
	switch c.Action {
	case SchedCreate, SchedUpdate:
		c.Def = d.scheduleDef()
	case SchedSkip:
		c.Tick = d.varint("tick")
	}
	return c
}

// schedulesSection encodes the schedules for the snapshot's section 3:
// uvarint n, then n times in name order: string name, the definition,
// varint anchor, varint last tick, uvarint last job, byte paused, varint
// created.
func (s *State) schedulesSection() []byte {
	var dst []byte
	dst = putUvarint(dst, uint64(len(s.schedules)))
	s.Schedules(func(sc *Schedule) bool {
		dst = putString(dst, sc.Name)
		dst = putScheduleDef(dst, &sc.Def)
		dst = putVarint(dst, sc.Anchor)
		dst = putVarint(dst, sc.LastTick)
		dst = putUvarint(dst, sc.LastJob)
		paused := byte(0)
		if sc.Paused {
			paused = 1
		}
		dst = append(dst, paused)
		dst = putVarint(dst, sc.CreatedAt)
		return true
	})
	return dst
}

// readSchedules reads section 3.
func (s *State) readSchedules(d *decoder) {
	n := d.uvarint("schedules")
	if d.err == nil && (n == 0 || n > MaxSchedules) {
		d.failAt("%d schedules (1 to %d)", n, MaxSchedules)
	}
	last := ""
	for i := uint64(0); d.err == nil && i < n; i++ {
		name := d.string("schedule name")
		if d.err == nil {
			if err := ValidScheduleName(name); err != nil || name <= last {
				d.failAt("schedule name %q bad or out of order", name)
			}
		}
		last = name
		def := d.scheduleDef()
		anchor, lastTick, lastJob := d.varint("anchor"), d.varint("last tick"), d.uvarint("last job")
		paused := d.byte("paused")
		created := d.varint("created")
		if d.err == nil && (paused > 1 || lastTick < anchor) {
			d.failAt("schedule %q: bad position", name)
		}
		if d.err != nil {
			return
		}
		sc := newSchedule(name, *def, anchor)
		sc.LastTick, sc.LastJob, sc.Paused, sc.CreatedAt = lastTick, lastJob, paused == 1, created
		if s.schedules == nil {
			s.schedules = make(map[string]*Schedule)
		}
		s.schedules[name] = sc
	}
}

// TickOps returns the ops that carry out sc's Plan at now: one OpEnqueue
// per tick (the template's job, naming the schedule and the tick, due at
// the tick, ids from id on), or one OpSchedule skip; none when nothing is
// due.
func (s *State) TickOps(sc *Schedule, now int64, id uint64) []Op {
	p := sc.Plan(now, sc.LastJob != 0 && s.Unfinished(sc.LastJob))
	if p.Skip != 0 {
		return []Op{{Kind: OpSchedule, At: now, Sched: &ScheduleChange{Action: SchedSkip, Name: sc.Name, Tick: p.Skip}}}
	}
	ops := make([]Op, 0, len(p.Ticks))
	for i, t := range p.Ticks {
		sp := sc.Def.Job
		sp.Schedule, sp.Tick = sc.Name, t
		ops = append(ops, Op{Kind: OpEnqueue, ID: id + uint64(i), At: now, Due: t, Spec: &sp})
	}
	return ops
}

// NextTick returns the earliest next tick among the schedules that are
// not paused, and false when there is none.
func (s *State) NextTick() (int64, bool) {
	var best int64
	found := false
	for _, sc := range s.schedules {
		if sc.Paused {
			continue
		}
		if t, ok := sc.Next(); ok && (!found || t < best) {
			best, found = t, true
		}
	}
	return best, found
}

// RestoreSchedule returns a schedule read back from storage that is not a
// journal (a database row): its definition and position.
func RestoreSchedule(name string, def ScheduleDef, anchor, lastTick int64, lastJob uint64, paused bool, created int64) *Schedule {
	sc := newSchedule(name, def, anchor)
	sc.LastTick, sc.LastJob, sc.Paused, sc.CreatedAt = lastTick, lastJob, paused, created
	return sc
}
