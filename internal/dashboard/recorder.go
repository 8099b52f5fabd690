package dashboard

import (
	"sync"
	"time"

	"github.com/runlog/runlog"
)

// SeriesMinutes is how many minutes of attempt outcomes a Recorder keeps.
const SeriesMinutes = 60

// MaxRecordedTargets bounds the targets a Recorder keeps a series for; the
// attempts of targets beyond it are counted in the overall series only.
const MaxRecordedTargets = 10000

// Outcomes as runlog reports them in AttemptEvent.Outcome.
const (
	outcomeSuccess   = "success"
	outcomeRetryable = "retryable"
	outcomePermanent = "permanent"
	outcomeUnsafe    = "unsafe"
)

// Minute counts the attempts that ended within one minute, by outcome.
type Minute struct {
	// Start is the first instant of the minute (UTC).
	Start                                   time.Time
	Succeeded, Retryable, Permanent, Unsafe int
}

// Failed counts the attempts of the minute that did not succeed.
func (m Minute) Failed() int { return m.Retryable + m.Permanent + m.Unsafe }

// Recorder is a runlog.Observer that counts attempt outcomes per minute over
// the last hour, overall and per target, in fixed ring buffers. Chain it
// into runlog.Config.Observer and give it to the dashboard (Options.Recorder)
// to draw the per-minute charts. It is safe for concurrent use and never
// blocks for long: each event is a few counter updates under a mutex.
type Recorder struct {
	now func() time.Time

	mu      sync.Mutex
	overall ring             // guarded by mu
	targets map[string]*ring // guarded by mu
}

var _ runlog.Observer = (*Recorder)(nil)

// ring holds one slot per minute, indexed by the minute number modulo
// SeriesMinutes; a slot whose stamp is not the minute asked for is stale
// (zero).
type ring struct {
	stamp  [SeriesMinutes]int64 // unix minute the slot counts
	counts [SeriesMinutes][4]int32
}

// NewRecorder returns a Recorder that reads the system clock.
func NewRecorder() *Recorder { return newRecorder(time.Now) }

func newRecorder(now func() time.Time) *Recorder {
	return &Recorder{now: now, targets: make(map[string]*ring)}
}

// AttemptFinished counts one ended attempt in the current minute, overall
// and for its target. Outcomes runlog does not define are ignored.
func (r *Recorder) AttemptFinished(e runlog.AttemptEvent) {
	var k int
	switch e.Outcome {
	case outcomeSuccess:
		k = 0
	case outcomeRetryable:
		k = 1
	case outcomePermanent:
		k = 2
	case outcomeUnsafe:
		k = 3
	default:
		return
	}
	minute := r.now().Unix() / 60
	r.mu.Lock()
	defer r.mu.Unlock()
	r.overall.add(minute, k)
	t, ok := r.targets[e.Target]
	if !ok {
		if len(r.targets) >= MaxRecordedTargets {
			return
		}
		t = new(ring)
		r.targets[e.Target] = t
	}
	t.add(minute, k)
}

// JournalSynced is ignored: the dashboard charts attempts only.
func (r *Recorder) JournalSynced(runlog.SyncEvent) {}

// LastHour returns the overall counts of the last SeriesMinutes minutes,
// oldest first; the last element is the current (partial) minute.
func (r *Recorder) LastHour() []Minute {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overall.lastHour(r.now())
}

// TargetLastHour is LastHour for one target; all zero for a target that
// had no attempt recorded.
func (r *Recorder) TargetLastHour(target string) []Minute {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.targets[target]
	if t == nil {
		t = new(ring)
	}
	return t.lastHour(r.now())
}

// Targets returns the targets that had an attempt end within the last
// hour, in no particular order.
func (r *Recorder) Targets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	oldest := r.now().Unix()/60 - SeriesMinutes + 1
	var out []string
	for name, g := range r.targets {
		for _, m := range g.stamp {
			if m >= oldest {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

func (g *ring) add(minute int64, k int) {
	i := minute % SeriesMinutes
	if g.stamp[i] != minute {
		g.stamp[i] = minute
		g.counts[i] = [4]int32{}
	}
	g.counts[i][k]++
}

func (g *ring) lastHour(now time.Time) []Minute {
	cur := now.Unix() / 60
	out := make([]Minute, SeriesMinutes)
	for j := range out {
		minute := cur - SeriesMinutes + 1 + int64(j)
		m := Minute{Start: time.Unix(minute*60, 0).UTC()}
		if i := minute % SeriesMinutes; g.stamp[i] == minute {
			c := g.counts[i]
			m.Succeeded, m.Retryable, m.Permanent, m.Unsafe = int(c[0]), int(c[1]), int(c[2]), int(c[3])
		}
		out[j] = m
	}
	return out
}
