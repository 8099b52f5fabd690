package dashboard

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// pageData is what every page template gets: the common fields set by
// setCommon and the page's own Data.
type pageData struct {
	Title  string
	Nav    string // the active navigation item
	Error  string // shown in an alert (error and login pages)
	Status int    // the error page's status
	Next   string // the login page's destination

	CSRF      string
	HXHeaders string // the htmx headers of every request: the CSRF token
	ReadOnly  bool
	Token     bool // the server has a token: show "Log out"
	LoggedIn  bool
	Flash     string
	Now       time.Time
	Self      string // this page's URI, where actions come back to
	Data      any
}

func (d *pageData) setCommon(h *handler, w http.ResponseWriter, r *http.Request) {
	d.Now = h.now()
	d.ReadOnly = h.opts.ReadOnly
	d.Token = h.auth.token
	acc := h.accessOf(r)
	d.LoggedIn = acc.ok
	d.Self = localPath(r.URL.RequestURI())
	if d.LoggedIn {
		d.CSRF = h.auth.csrfToken(acc)
		b, _ := json.Marshal(map[string]string{csrfHeader: d.CSRF})
		d.HXHeaders = string(b)
		if r.Method == http.MethodGet {
			d.Flash = takeFlash(w, r)
		}
	}
}

// Rel says when t is relative to the page's time: "in 3s", "5m ago".
func (d pageData) Rel(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	dt := t.Sub(d.Now)
	if dt >= 0 {
		return "in " + human(dt)
	}
	return human(-dt) + " ago"
}

// human rounds d for a reader: "850ms", "12s", "3m20s", "2h5m", "3d4h".
func human(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	default:
		days := int(d / (24 * time.Hour))
		return fmt.Sprintf("%dd%dh", days, int((d-time.Duration(days)*24*time.Hour)/time.Hour))
	}
}

// stamp formats t for a table: UTC to the second, "" when zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// overviewData is the overview page.
type overviewData struct {
	Stats          runlog.Stats
	Lag            time.Duration // queue lag; 0 when nothing due is waiting
	Open, HalfOpen []runlog.TargetStats
	// Targets counts the targets the runner lists (breaker history) and
	// those the Recorder saw in the last hour.
	Targets   int
	hourChart // Chart nil without a Recorder
	// Empty: no job at all yet: the page shows the first command to run.
	Empty bool
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	st, err := h.runner.Stats(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	d := overviewData{Stats: st, Empty: stateCount(st, "") == 0}
	if now := h.now(); !st.OldestDue.IsZero() && st.OldestDue.Before(now) {
		d.Lag = now.Sub(st.OldestDue)
	}
	for _, t := range st.Targets {
		t = liveBreaker(t, h.now())
		switch t.State {
		case "open":
			d.Open = append(d.Open, t)
		case "half-open":
			d.HalfOpen = append(d.HalfOpen, t)
		}
	}
	known := make(map[string]bool, len(st.Targets))
	for _, t := range st.Targets {
		known[t.Target] = true
	}
	d.Targets = len(known)
	if h.opts.Recorder != nil {
		for _, t := range h.opts.Recorder.Targets() {
			if !known[t] {
				d.Targets++
			}
		}
		d.hourChart = newHourChart(h.opts.Recorder.LastHour(), 600, 140)
	}
	h.render(w, r, http.StatusOK, "overview", pageData{Title: "Overview", Nav: "overview", Data: d})
}

// filter is the jobs filter as the query string gives it.
type filter struct {
	State, Kind, Target, Q string
	Oldest                 bool
	After                  uint64
	// Before is the cursor of a previous page: the page of jobs that
	// come right before it in the order.
	Before uint64
}

// states lists the job states in the order the dashboard shows them.
var states = []runlog.State{runlog.StatePending, runlog.StateRunning, runlog.StateSucceeded, runlog.StateFailed, runlog.StateCancelled}

// maxFilterLen bounds each text field of a filter.
const maxFilterLen = 200

// parseFilter reads the filter from q: state, kind, target, q (search),
// order (newest or oldest) and after (the cursor).
func parseFilter(q url.Values) (filter, error) {
	f := filter{State: q.Get("state"), Kind: q.Get("kind"), Target: q.Get("target"), Q: q.Get("q")}
	if f.State != "" && !slices.Contains(states, runlog.State(f.State)) {
		return filter{}, fmt.Errorf("unknown state %q: use pending, running, succeeded, failed or cancelled", f.State)
	}
	for _, s := range []string{f.Kind, f.Target, f.Q} {
		if len(s) > maxFilterLen {
			return filter{}, fmt.Errorf("a filter field is longer than %d bytes", maxFilterLen)
		}
	}
	switch o := q.Get("order"); o {
	case "", "newest":
	case "oldest":
		f.Oldest = true
	default:
		return filter{}, fmt.Errorf("unknown order %q: use newest or oldest", o)
	}
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			return filter{}, fmt.Errorf("the cursor %q is not a page cursor: follow the Next link", a)
		}
		f.After = n
	}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseUint(b, 10, 64)
		if err != nil || f.After != 0 {
			return filter{}, fmt.Errorf("the cursor %q is not a page cursor: follow the Previous link", b)
		}
		f.Before = n
	}
	return f, nil
}

// list is the engine filter of f.
// A previous page is read in the other order from its cursor, and
// reversed (see list).
func (f filter) list(limit int) runlog.ListFilter {
	if f.Before != 0 {
		return runlog.ListFilter{State: runlog.State(f.State), Kind: f.Kind, Target: f.Target, Search: f.Q, After: f.Before, Limit: limit, Oldest: !f.Oldest}
	}
	return runlog.ListFilter{State: runlog.State(f.State), Kind: f.Kind, Target: f.Target, Search: f.Q, After: f.After, Limit: limit, Oldest: f.Oldest}
}

// query encodes f (with the given cursor) as a query string.
func (f filter) query(after uint64) string { return f.queryPage(after, 0) }

// queryPage encodes f with a next-page (after) or previous-page (before)
// cursor.
func (f filter) queryPage(after, before uint64) string {
	v := url.Values{}
	for k, s := range map[string]string{"state": f.State, "kind": f.Kind, "target": f.Target, "q": f.Q} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if f.Oldest {
		v.Set("order", "oldest")
	}
	if after != 0 {
		v.Set("after", strconv.FormatUint(after, 10))
	}
	if before != 0 {
		v.Set("before", strconv.FormatUint(before, 10))
	}
	return v.Encode()
}

// listData is the jobs and failed pages.
type listData struct {
	Filter  filter
	Jobs    []runlog.Job
	Next    string // URL of the next page, "" on the last
	First   string // URL of the first page, "" on it
	States  []runlog.State
	Targets []string
	Prev    string // URL of the previous page, "" on the first
	Tabs    []stateTab
	Failed  bool // the failed-jobs page
	Count   int  // jobs in the state filtered on (from Stats), -1 if unknown
	// Empty: no job at all in this state (nothing filtered): the page
	// shows the first command to run instead of an empty table.
	Empty bool
	// Groups is the failed page's triage (first page only), nil elsewhere.
	Groups *groupsData
	// Cancellable: the filter selects only pending or running jobs, so
	// "cancel all matching" applies.
	Cancellable bool
	// Discardable: the filter selects only finished jobs of one state, so
	// "discard all matching" applies.
	Discardable bool
	// Exact is the job whose id is the search text, if there is one: the
	// search matches substrings, so its row may be far down the pages.
	Exact *runlog.Job
}

func (h *handler) jobs(w http.ResponseWriter, r *http.Request) { h.list(w, r, false) }

func (h *handler) failed(w http.ResponseWriter, r *http.Request) { h.list(w, r, true) }

func (h *handler) list(w http.ResponseWriter, r *http.Request, failedPage bool) {
	f, err := parseFilter(r.URL.Query())
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	path, title, nav := "/jobs", "Jobs", "jobs"
	if failedPage {
		f.State = string(runlog.StateFailed)
		path, title, nav = "/failed", "Failed jobs", "failed"
	}
	page, err := h.runner.List(r.Context(), f.list(PageSize))
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	st, err := h.runner.Stats(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	d := listData{Filter: f, Jobs: page.Jobs, States: states, Failed: failedPage, Count: -1}
	if f.Before != 0 {
		// Read backwards from the cursor: reverse, and link on both sides.
		slices.Reverse(d.Jobs)
		if page.Next != 0 {
			d.Prev = path + "?" + f.queryPage(0, d.Jobs[0].ID)
		}
		if n := len(d.Jobs); n > 0 {
			d.Next = path + "?" + f.queryPage(d.Jobs[n-1].ID, 0)
		}
		if d.Prev != "" {
			d.First = path + "?" + f.query(0)
		}
	} else {
		if page.Next != 0 {
			d.Next = path + "?" + f.query(page.Next)
		}
		if f.After != 0 && len(d.Jobs) > 0 {
			d.Prev = path + "?" + f.queryPage(0, d.Jobs[0].ID)
		}
		if f.After != 0 {
			d.First = path + "?" + f.query(0)
		}
	}
	d.Tabs = stateTabs(st, f, path)
	d.Cancellable = f.State == string(runlog.StatePending) || f.State == string(runlog.StateRunning)
	d.Discardable = f.State == string(runlog.StateFailed) || f.State == string(runlog.StateSucceeded) || f.State == string(runlog.StateCancelled)
	if failedPage && f.After == 0 && f.Before == 0 && len(d.Jobs) > 0 {
		g, err := h.groupFailed(r.Context(), f)
		if err != nil {
			h.engineError(w, r, err)
			return
		}
		d.Groups = &g
	}
	for _, t := range st.Targets {
		d.Targets = append(d.Targets, t.Target)
	}
	if f.Kind == "" && f.Target == "" && f.Q == "" {
		d.Count = stateCount(st, runlog.State(f.State))
		d.Empty = d.Count == 0 && len(d.Jobs) == 0
	}
	if id, err := parseID(f.Q); err == nil && f.After == 0 {
		if j, err := h.runner.Job(r.Context(), id); err == nil {
			d.Exact = &j
		}
	}
	h.render(w, r, http.StatusOK, "jobs", pageData{Title: title, Nav: nav, Data: d})
}

// stateTab is one tab of the jobs pages: a state with its count.
type stateTab struct {
	Label  string
	State  string // "" for every state
	Count  int
	URL    string
	Active bool
}

// stateTabs are the tabs of the jobs pages: every state with its count
// (of all jobs in it, from the engine's counters), linking to the list
// with the page's other filters kept; failed links to the failed page.
func stateTabs(st runlog.Stats, f filter, path string) []stateTab {
	cur := f.State
	if path == "/failed" {
		cur = string(runlog.StateFailed)
	}
	f.After, f.Before = 0, 0
	tabs := make([]stateTab, 0, len(states)+1)
	for _, s := range append([]runlog.State{""}, states...) {
		g := f
		g.State = string(s)
		url := "/jobs"
		if s == runlog.StateFailed {
			g.State, url = "", "/failed"
		}
		if q := g.query(0); q != "" {
			url += "?" + q
		}
		label := string(s)
		if s == "" {
			label = "all"
		}
		tabs = append(tabs, stateTab{Label: label, State: string(s), Count: stateCount(st, s), URL: url, Active: string(s) == cur})
	}
	return tabs
}

// stateCount is the number of jobs in state s (all jobs for "").
func stateCount(st runlog.Stats, s runlog.State) int {
	switch s {
	case runlog.StatePending:
		return st.Pending
	case runlog.StateRunning:
		return st.Running
	case runlog.StateSucceeded:
		return st.Succeeded
	case runlog.StateFailed:
		return st.Failed
	case runlog.StateCancelled:
		return st.Cancelled
	}
	return st.Pending + st.Running + st.Succeeded + st.Failed + st.Cancelled
}

// jobData is the job page.
type jobData struct {
	Job         runlog.Job
	Payload     string
	PayloadNote string
	Attempts    []attemptView
	Breaker     *runlog.TargetStats // nil when the target has no breaker history
	CanRetry    bool
	CanCancel   bool
	CanReplay   bool // finished: a replay re-sends it as a new job
	CanDiscard  bool // finished: a discard removes it for good
	Live        bool // not finished: the page refreshes itself
	Timeline    []event
}

// attemptView is one row of the attempts table.
type attemptView struct {
	runlog.Attempt
	Duration time.Duration // so far, while running
	Running  bool
	// Delivery is the delivery log of an http attempt, nil for any other.
	Delivery *kinds.Delivery
}

// parseID reads a job id: decimal digits only.
func parseID(s string) (uint64, error) {
	if s == "" || len(s) > 20 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a job id: ids are decimal numbers", s)
	}
	return strconv.ParseUint(s, 10, 64)
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.errorPage(w, r, http.StatusBadRequest, err.Error())
		return
	}
	j, err := h.runner.Job(r.Context(), id)
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	st, err := h.runner.Stats(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	now := h.now()
	d := jobData{Job: j}
	d.Payload, d.PayloadNote = prettyPayload(j.Payload)
	for _, a := range j.History {
		v := attemptView{Attempt: a}
		if d, ok := kinds.DecodeDelivery([]byte(a.Output)); ok {
			v.Delivery = &d
		}
		if a.EndedAt.IsZero() {
			v.Running, v.Duration = true, now.Sub(a.StartedAt)
		} else {
			v.Duration = a.EndedAt.Sub(a.StartedAt)
		}
		d.Attempts = append(d.Attempts, v)
	}
	for i := range st.Targets {
		if st.Targets[i].Target == j.Target {
			b := liveBreaker(st.Targets[i], now)
			d.Breaker = &b
			break
		}
	}
	d.Timeline = timeline(j, d.Attempts, d.Breaker, now)
	switch j.State {
	case runlog.StateFailed, runlog.StateCancelled:
		d.CanRetry, d.CanReplay = true, true
	case runlog.StateSucceeded:
		d.CanReplay = true
	case runlog.StatePending, runlog.StateRunning:
		d.CanCancel, d.Live = true, true
	}
	d.CanDiscard = d.CanReplay
	h.render(w, r, http.StatusOK, "job", pageData{Title: fmt.Sprintf("Job %d", j.ID), Nav: "jobs", Data: d})
}

// maxShownPayload bounds the payload shown on the job page.
const maxShownPayload = 64 << 10

// prettyPayload renders a payload for reading: indented JSON when it is
// JSON, the text when it is UTF-8, else a hex dump; with a note saying
// which.
func prettyPayload(p []byte) (text, note string) {
	if len(p) == 0 {
		return "", "empty"
	}
	var cut string
	if len(p) > maxShownPayload {
		cut = fmt.Sprintf(", first %d of %d bytes shown", maxShownPayload, len(p))
	}
	if json.Valid(p) {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			s := b.String()
			if len(s) > maxShownPayload {
				s = strings.ToValidUTF8(s[:maxShownPayload], "")
			}
			return s, "JSON" + cut
		}
	}
	shown := p[:min(len(p), maxShownPayload)]
	if utf8.Valid(p) {
		return strings.ToValidUTF8(string(shown), ""), "text" + cut
	}
	return hex.Dump(shown), fmt.Sprintf("binary, %d bytes as hex%s", len(p), cut)
}

// targetView is one row of the targets page.
type targetView struct {
	runlog.TargetStats
	hourChart
}

func (h *handler) targets(w http.ResponseWriter, r *http.Request) {
	st, err := h.runner.Stats(r.Context())
	if err != nil {
		h.engineError(w, r, err)
		return
	}
	views := make([]targetView, 0, len(st.Targets))
	known := make(map[string]bool, len(st.Targets))
	for _, t := range st.Targets {
		views = append(views, targetView{TargetStats: liveBreaker(t, h.now())})
		known[t.Target] = true
	}
	if rec := h.opts.Recorder; rec != nil {
		for _, name := range rec.Targets() {
			if !known[name] {
				views = append(views, targetView{TargetStats: runlog.TargetStats{Target: name, State: "closed"}})
			}
		}
		for i := range views {
			views[i].hourChart = newHourChart(rec.TargetLastHour(views[i].Target), 180, 32)
		}
	}
	slices.SortFunc(views, func(a, b targetView) int { return naturalCompare(a.Target, b.Target) })
	h.render(w, r, http.StatusOK, "targets", pageData{Title: "Targets", Nav: "targets", Data: views})
}
