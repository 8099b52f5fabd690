package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/runlog/runlog"
)

// queues is the page of the queues: each one's state, concurrency, rate
// limit and load, with a button to pause or resume it, and a form to set a
// queue's concurrency and rate limit.
func (h *handler) queues(w http.ResponseWriter, r *http.Request) {
	qs, err := h.runner.Queues(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "queues", pageData{Title: "Queues", Nav: "queues", Data: qs})
}

func (h *handler) pauseQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	_, err := h.runner.PauseQueue(r.Context(), name)
	h.queueDone(w, r, name, err, "paused: none of its jobs starts until it is resumed")
}

func (h *handler) resumeQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	_, err := h.runner.ResumeQueue(r.Context(), name)
	h.queueDone(w, r, name, err, "resumed: its due jobs start now")
}

// setQueue sets what the form gives of a queue's setting: name, and
// concurrency and/or rate (with burst); a field left empty keeps the
// queue's.
func (h *handler) setQueue(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	name := strings.TrimSpace(f.Get("queue"))
	if name == "" {
		h.errorPage(w, r, http.StatusBadRequest, "The form names no queue: give the queue's name (default for the default queue).")
		return
	}
	var conc *int
	if s := strings.TrimSpace(f.Get("concurrency")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("Concurrency %q is not a whole number: give 0 (no bound but the pool) or more, or leave it empty to keep the queue's.", s))
			return
		}
		conc = &n
	}
	lim, ok := h.formLimit(w, r)
	if !ok {
		return
	}
	if conc == nil && lim == nil {
		h.errorPage(w, r, http.StatusBadRequest, "The form changes nothing: give a concurrency, a rate, or both.")
		return
	}
	_, err := h.runner.SetQueueSetting(r.Context(), name, conc, nil, lim)
	h.queueDone(w, r, name, err, "set: "+settingText(conc, lim))
}

// setTargetLimit sets a target's rate limit from the form: target, rate
// (0 removes the limit) and burst.
func (h *handler) setTargetLimit(w http.ResponseWriter, r *http.Request) {
	target := strings.TrimSpace(r.PostForm.Get("target"))
	if target == "" {
		h.errorPage(w, r, http.StatusBadRequest, "The form names no target: give the target as its jobs name it (e.g. http://127.0.0.1:9000).")
		return
	}
	lim, ok := h.formLimit(w, r)
	if !ok {
		return
	}
	if lim == nil {
		h.errorPage(w, r, http.StatusBadRequest, "The form gives no rate: attempts per second, or 0 to remove the limit.")
		return
	}
	if err := h.runner.SetLimit(r.Context(), target, *lim); err != nil {
		h.invalidOr(w, r, err)
		return
	}
	h.log.Info("dashboard: target rate limit set", "target", target, "rate", lim.Rate, "burst", lim.Burst, "remote", r.RemoteAddr)
	done(w, r, "/targets", fmt.Sprintf("Target %s: %s.", target, limitText(*lim)))
}

// formLimit reads the form's rate and burst: nil when the rate is empty.
func (h *handler) formLimit(w http.ResponseWriter, r *http.Request) (*runlog.Limit, bool) {
	rs, bs := strings.TrimSpace(r.PostForm.Get("rate")), strings.TrimSpace(r.PostForm.Get("burst"))
	if rs == "" {
		if bs != "" {
			h.errorPage(w, r, http.StatusBadRequest, "A burst without a rate: give a rate too (attempts per second, or 0 to remove the limit).")
			return nil, false
		}
		return nil, true
	}
	rate, err := strconv.ParseFloat(rs, 64)
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("Rate %q is not a number: give attempts per second (0.001 to 1000000), or 0 to remove the limit.", rs))
		return nil, false
	}
	l := runlog.Limit{Rate: rate}
	if bs != "" {
		if l.Burst, err = strconv.Atoi(bs); err != nil {
			h.errorPage(w, r, http.StatusBadRequest, fmt.Sprintf("Burst %q is not a whole number: give 1 to 1000000, or leave it empty for 1.", bs))
			return nil, false
		}
	}
	return &l, true
}

// queueDone answers a queue action: back to the queues page with a flash,
// or the error.
func (h *handler) queueDone(w http.ResponseWriter, r *http.Request, name string, err error, did string) {
	if err != nil {
		h.invalidOr(w, r, err)
		return
	}
	h.log.Info("dashboard: queue "+did, "queue", name, "remote", r.RemoteAddr)
	done(w, r, "/queues", fmt.Sprintf("Queue %s is %s.", name, did))
}

// invalidOr shows a refused input as a 400 that says what to fix, any
// other error as engineError does.
func (h *handler) invalidOr(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, runlog.ErrInvalid) {
		h.errorPage(w, r, http.StatusBadRequest, "Refused: "+err.Error())
		return
	}
	h.engineError(w, r, err)
}

// settingText says what a queue form set.
func settingText(conc *int, lim *runlog.Limit) string {
	var parts []string
	if conc != nil {
		parts = append(parts, fmt.Sprintf("concurrency %d", *conc))
	}
	if lim != nil {
		parts = append(parts, limitText(*lim))
	}
	return strings.Join(parts, ", ")
}

// limitText says what a rate limit is.
func limitText(l runlog.Limit) string {
	if l.Rate == 0 {
		return "no rate limit"
	}
	return fmt.Sprintf("rate limit %s/s, burst %d", strconv.FormatFloat(l.Rate, 'f', -1, 64), max(l.Burst, 1))
}

// queueURL is the path of a queue's actions.
func queueURL(name string) string { return "/queues/" + url.PathEscape(name) }
