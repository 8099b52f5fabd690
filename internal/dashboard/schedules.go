package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/runlog/runlog"
)

// schedules is the page of the schedules: when each ticks, its next tick,
// its rules and its last job, with a button to pause or resume it.
func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	list, err := h.runner.Schedules(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "schedules", pageData{Title: "Schedules", Nav: "schedules", Data: list})
}

func (h *handler) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	h.scheduleAction(w, r, h.runner.PauseSchedule, "paused: no tick makes a job until it is resumed")
}

func (h *handler) resumeSchedule(w http.ResponseWriter, r *http.Request) {
	h.scheduleAction(w, r, h.runner.ResumeSchedule, "resumed: its next tick makes a job")
}

// scheduleAction runs act on the schedule of the path and returns to the
// schedules page with a flash saying what happened.
func (h *handler) scheduleAction(w http.ResponseWriter, r *http.Request, act func(ctx context.Context, name string) (runlog.Schedule, error), did string) {
	name := r.PathValue("name")
	if _, err := act(r.Context(), name); err != nil {
		if errors.Is(err, runlog.ErrScheduleNotFound) {
			done(w, r, "/schedules", fmt.Sprintf("Schedule %q does not exist (deleted meanwhile?).", name))
			return
		}
		h.engineError(w, r, err)
		return
	}
	h.log.Info("dashboard: schedule "+r.URL.Path[len("/schedules/"+name+"/"):], "schedule", name, "remote", r.RemoteAddr)
	done(w, r, "/schedules", fmt.Sprintf("Schedule %s is %s.", name, did))
}

// scheduleURL is the path of a schedule's actions.
func scheduleURL(name string) string { return "/schedules/" + url.PathEscape(name) }
