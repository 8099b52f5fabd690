package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/state"
)

// ScheduleRequest is the JSON body of POST /v1/schedules and PATCH
// /v1/schedules/{name}. Cron or Every (a Go duration, at least 1s); Job is
// the body of POST /v1/jobs (without key and run_at). In a PATCH every
// field is optional and replaces only what it names (cron replaces every
// and the reverse).
type ScheduleRequest struct {
	Name     string          `json:"name,omitempty"`
	Cron     string          `json:"cron,omitempty"`
	Every    string          `json:"every,omitempty"`
	Timezone string          `json:"timezone,omitempty"`
	Job      json.RawMessage `json:"job,omitempty"`
	Overlap  string          `json:"overlap,omitempty"`
	CatchUp  string          `json:"catch_up,omitempty"`
}

// Schedule is the JSON form of a schedule. Next is its next tick (left out
// when it has none); LastTick the latest tick dealt with.
type Schedule struct {
	Name      string      `json:"name"`
	Cron      string      `json:"cron,omitempty"`
	Every     string      `json:"every,omitempty"`
	Timezone  string      `json:"timezone,omitempty"`
	Job       ScheduleJob `json:"job"`
	Overlap   string      `json:"overlap"`
	CatchUp   string      `json:"catch_up"`
	Paused    bool        `json:"paused"`
	Next      time.Time   `json:"next,omitzero"`
	LastTick  time.Time   `json:"last_tick,omitzero"`
	LastJob   uint64      `json:"last_job,omitempty"`
	CreatedAt time.Time   `json:"created_at,omitzero"`
}

// ScheduleJob is the template of a schedule's jobs as stored: the kind,
// target, payload (for http, the request; for exec, the command), timeout
// and retry policy each tick's job gets.
type ScheduleJob struct {
	Kind    string          `json:"kind"`
	Target  string          `json:"target"`
	Payload json.RawMessage `json:"payload"`
	Timeout string          `json:"timeout,omitempty"`
	Retry   *Retry          `json:"retry,omitempty"`
}

// ScheduleList is the answer of GET /v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

func scheduleView(sc runlog.Schedule) Schedule {
	v := Schedule{
		Name: sc.Name, Cron: sc.Cron, Timezone: sc.TimeZone, Overlap: sc.Overlap, CatchUp: sc.CatchUp, Paused: sc.Paused,
		Next: sc.Next.UTC(), LastTick: sc.LastTick.UTC(), LastJob: sc.LastJob, CreatedAt: sc.CreatedAt.UTC(),
		Job: ScheduleJob{Kind: sc.Job.Kind, Target: sc.Job.Target, Payload: payloadJSON(sc.Job.Payload)},
	}
	if sc.Every > 0 {
		v.Every = sc.Every.String()
	}
	if sc.Job.Timeout > 0 {
		v.Job.Timeout = sc.Job.Timeout.String()
	}
	if p := sc.Job.Retry; p != nil {
		v.Job.Retry = &Retry{Attempts: p.Attempts, Base: p.Base.String(), Cap: p.Cap.String()}
		if p.Deadline > 0 {
			v.Job.Retry.Deadline = p.Deadline.String()
		}
	}
	return v
}

// scheduleRequest resolves a decoded request into the runner's, over base
// (a PATCH's current schedule; nil for a create, which needs name, cron or
// every, and job).
func (a *API) scheduleRequest(in *ScheduleRequest, base *runlog.Schedule) (runlog.ScheduleRequest, error) {
	var out runlog.ScheduleRequest
	if base != nil {
		if in.Name != "" && in.Name != base.Name {
			return out, badRequest("name %q differs from the schedule's %q in the path; a schedule cannot be renamed (create another)", in.Name, base.Name)
		}
		out = runlog.ScheduleRequest{Name: base.Name, Cron: base.Cron, Every: base.Every, TimeZone: base.TimeZone,
			Job: base.Job, Overlap: base.Overlap, CatchUp: base.CatchUp}
		if in.Cron != "" || in.Every != "" {
			out.Cron, out.Every, out.TimeZone = "", 0, ""
		}
	} else {
		if in.Name == "" {
			return out, badRequest("name is required: 1 to %d letters, digits, '.', '_' and '-'", state.MaxScheduleName)
		}
		if len(in.Job) == 0 {
			return out, badRequest("job is required: the body of POST /v1/jobs that each tick enqueues")
		}
		out.Name = in.Name
	}
	if in.Cron != "" {
		out.Cron = in.Cron
	}
	if in.Every != "" {
		if in.Cron != "" {
			return out, badRequest("give cron or every, not both")
		}
		d, err := parseDuration("every", in.Every)
		if err != nil {
			return out, err
		}
		if d < time.Second {
			return out, badRequest("every %q: the shortest interval is 1s", in.Every)
		}
		out.Every = d
	}
	if in.Timezone != "" {
		out.TimeZone = in.Timezone
	}
	if in.Overlap != "" {
		out.Overlap = in.Overlap
	}
	if in.CatchUp != "" {
		out.CatchUp = in.CatchUp
	}
	if len(in.Job) > 0 {
		var jr JobRequest
		if err := decodeStrict(in.Job, &jr, "a job object (the body of POST /v1/jobs)"); err != nil {
			return out, err
		}
		if jr.Key != "" || jr.RunAt != "" {
			return out, badRequest("job: a schedule's job has no key nor run_at: each tick makes its own job, due at the tick")
		}
		job, err := jr.Resolve(a.cfg.Policy)
		if err != nil {
			return out, err
		}
		out.Job = job
	}
	return out, nil
}

func (a *API) createSchedule(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var in ScheduleRequest
	if err := decodeStrict(body, &in, `a schedule {"name", "cron" or "every", "timezone", "job", "overlap", "catch_up"}`); err != nil {
		a.fail(w, r, err)
		return
	}
	req, err := a.scheduleRequest(&in, nil)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	sc, err := a.runner.CreateSchedule(r.Context(), req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", a.base+"/v1/schedules/"+sc.Name)
	writeJSON(w, http.StatusCreated, scheduleView(sc))
}

func (a *API) listSchedules(w http.ResponseWriter, r *http.Request) {
	list, err := a.runner.Schedules(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := ScheduleList{Schedules: make([]Schedule, 0, len(list))}
	for _, sc := range list {
		out.Schedules = append(out.Schedules, scheduleView(sc))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getSchedule(w http.ResponseWriter, r *http.Request) {
	sc, err := a.runner.Schedule(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleView(sc))
}

func (a *API) patchSchedule(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var in ScheduleRequest
	if err := decodeStrict(body, &in, `a schedule's fields to change {"cron" or "every", "timezone", "job", "overlap", "catch_up"}`); err != nil {
		a.fail(w, r, err)
		return
	}
	cur, err := a.runner.Schedule(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	req, err := a.scheduleRequest(&in, &cur)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	sc, err := a.runner.UpdateSchedule(r.Context(), req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleView(sc))
}

func (a *API) deleteSchedule(w http.ResponseWriter, r *http.Request) {
	if err := a.runner.DeleteSchedule(r.Context(), r.PathValue("name")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	a.scheduleAction(w, r, a.runner.PauseSchedule)
}

func (a *API) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	a.scheduleAction(w, r, a.runner.ResumeSchedule)
}

func (a *API) scheduleAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, name string) (runlog.Schedule, error)) {
	sc, err := act(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, scheduleView(sc))
}

// scheduleStatus maps the schedule errors onto HTTP statuses (0: not one).
func scheduleStatus(err error) int {
	switch {
	case errors.Is(err, runlog.ErrScheduleNotFound):
		return http.StatusNotFound
	case errors.Is(err, runlog.ErrScheduleExists):
		return http.StatusConflict
	case errors.Is(err, runlog.ErrTooManySchedules):
		return http.StatusBadRequest
	}
	return 0
}
