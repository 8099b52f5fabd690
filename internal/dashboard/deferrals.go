package dashboard

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runlog/runlog"
)

// deferralGroup is a run of a job's deferrals that followed the same
// breaker failures: "Deferred 3× by the breaker of partner:443 …".
type deferralGroup struct {
	Count       int
	First, Last time.Time
	Text        string
}

// deferralsData is the deferrals page of one job (shown inside its page).
type deferralsData struct {
	Job      uint64
	Kept     bool
	Complete bool
	Groups   []deferralGroup
}

// groupDeferrals folds the deferrals that followed the same failures into
// one line each, oldest first.
func groupDeferrals(d runlog.Deferrals) []deferralGroup {
	var out []deferralGroup
	var prev []uint64
	for _, df := range d.List {
		ids := make([]uint64, len(df.After))
		for i, f := range df.After {
			ids[i] = f.Job
		}
		if len(out) > 0 && slices.Equal(ids, prev) {
			g := &out[len(out)-1]
			g.Count++
			g.Last = df.At
			continue
		}
		prev = ids
		text := "by the breaker of " + d.Target
		if len(df.After) > 0 {
			jobs := slices.Compact(slices.Sorted(slices.Values(ids)))
			names := make([]string, len(jobs))
			for i, id := range jobs {
				names[i] = strconv.FormatUint(id, 10)
			}
			text += fmt.Sprintf(", open since %s after %d %s of %s %s", stamp(df.After[0].At), len(ids), plural(len(ids), "failure", "failures"),
				plural(len(jobs), "job", "jobs"), strings.Join(names, ", "))
		}
		out = append(out, deferralGroup{Count: 1, First: df.At, Last: df.At, Text: text})
	}
	return out
}

// deferrals shows what the store keeps of a job's deferrals (the job page
// loads it on demand: on the embedded store it reads the journal).
func (h *handler) deferrals(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	d, err := h.runner.Deferrals(r.Context(), id)
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	data := deferralsData{Job: id, Kept: d.Kept, Complete: d.Complete, Groups: groupDeferrals(d)}
	h.render(w, r, http.StatusOK, "deferrals", pageData{Title: fmt.Sprintf("Deferrals of job %d", id), Nav: "jobs", Data: data})
}
