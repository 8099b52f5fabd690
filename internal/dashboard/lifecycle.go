package dashboard

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/runlog/runlog"
)

// enableTarget enables the disabled target of the form (the targets
// page's Enable button) and returns to the targets page with a flash.
func (h *handler) enableTarget(w http.ResponseWriter, r *http.Request) {
	target := r.PostForm.Get("target")
	if target == "" {
		h.errorPage(w, r, http.StatusBadRequest, "the form names no target: use the Enable button of a disabled target on the targets page")
		return
	}
	ts, err := h.runner.EnableTarget(r.Context(), target)
	if errors.Is(err, runlog.ErrTargetNotDisabled) {
		done(w, r, "/targets", fmt.Sprintf("Target %s was not enabled: it is not disabled (enabled meanwhile?).", target))
		return
	}
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	h.log.Info("dashboard: target enabled", "target", target, "remote", r.RemoteAddr)
	done(w, r, "/targets", fmt.Sprintf("Target %s is enabled: its %d held jobs are delivered again.", target, ts.Pending))
}
