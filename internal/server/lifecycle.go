package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runlog/runlog"
)

// The endpoint lifecycle in the API: GET /v1/targets shows a disabled
// target ("disabled": true, "disabled_reason", "disabled_at") and when a
// failing one began failing ("failing_since"); POST /v1/targets/enable
// enables a disabled one by hand.

// TargetEnableRequest is the body of POST /v1/targets/enable.
type TargetEnableRequest struct {
	// Target is the target as GET /v1/targets lists it (an http URL is
	// taken to its scheme, host and port, as jobs' targets are).
	Target string `json:"target"`
}

// enableTarget serves POST /v1/targets/enable: 200 with the target, 404
// when it is not disabled (or unknown), 400 for a bad body.
func (a *API) enableTarget(w http.ResponseWriter, r *http.Request) {
	body, ok := a.readBody(w, r)
	if !ok {
		return
	}
	var in TargetEnableRequest
	if err := decodeStrict(body, &in, `{"target": "..."}`); err != nil {
		a.fail(w, r, err)
		return
	}
	target, err := secretTarget(in.Target)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ts, err := a.runner.EnableTarget(r.Context(), target)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var secrets map[string][]SecretInfo
	hasDefault := false
	if a.cfg.Secrets != nil {
		secrets, hasDefault = a.cfg.Secrets.List(), a.cfg.Secrets.HasDefault()
	}
	v := targetsView(runlog.Stats{Targets: []runlog.TargetStats{ts}}, map[string][]SecretInfo{target: secrets[target]}, hasDefault)
	writeJSON(w, http.StatusOK, v.Targets[0])
}

// lifeFields sets the lifecycle fields of v from t.
func lifeFields(v *Target, t runlog.TargetStats) {
	v.Disabled, v.DisabledReason, v.DisabledAt, v.FailingSince = t.Disabled, t.DisabledReason, t.DisabledAt, t.FailingSince
}

// EnableTarget enables the disabled target (POST /v1/targets/enable).
func (c *Client) EnableTarget(ctx context.Context, target string) (Target, error) {
	var out Target
	body, err := json.Marshal(TargetEnableRequest{Target: target})
	if err != nil {
		return out, err
	}
	_, err = c.do(ctx, http.MethodPost, "/v1/targets/enable", body, &out)
	return out, err
}

// lifeMetrics are the lifecycle's metrics: runlog_targets_disabled, read
// from the Stats at each scrape, and runlog_target_transitions_total,
// counted as the runner reports (runlog.TargetObserver). Their labels take
// fixed values: no target label, so no bound is needed.
type lifeMetrics struct {
	transitions *prometheus.CounterVec
}

var descDisabled = prometheus.NewDesc("runlog_targets_disabled",
	"Targets disabled now (a gone answer or DisableAfter of failing; their jobs are held until enabled by hand).", nil, nil)

func newLifeMetrics() lifeMetrics {
	return lifeMetrics{transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runlog_target_transitions_total",
		Help: "Targets disabled and enabled, by the state entered (disabled, enabled) and why (gone: the target answered 410; failing: it failed for --disable-after; manual: enabled by hand).",
	}, []string{"to", "reason"})}
}

// TargetChanged counts a target disabled or enabled (runlog.TargetObserver).
func (m *Metrics) TargetChanged(e runlog.TargetEvent) {
	switch {
	case !e.Disabled:
		m.life.transitions.WithLabelValues("enabled", "manual").Inc()
	case e.Gone:
		m.life.transitions.WithLabelValues("disabled", "gone").Inc()
	default:
		m.life.transitions.WithLabelValues("disabled", "failing").Inc()
	}
}

// collectDisabled sends runlog_targets_disabled from s.
func collectDisabled(ch chan<- prometheus.Metric, s runlog.Stats) {
	n := 0
	for _, t := range s.Targets {
		if t.Disabled {
			n++
		}
	}
	ch <- prometheus.MustNewConstMetric(descDisabled, prometheus.GaugeValue, float64(n))
}

// targetNotDisabled reports whether err is EnableTarget's "not disabled",
// answered 404.
func targetNotDisabled(err error) bool { return errors.Is(err, runlog.ErrTargetNotDisabled) }

// formatLife returns the lifecycle column of `runlog targets`: "disabled
// (reason)", "failing since T", or "".
func formatLife(t Target) string {
	switch {
	case t.Disabled:
		return fmt.Sprintf("disabled since %s: %s", t.DisabledAt.UTC().Format("2006-01-02T15:04:05Z"), oneLineReason(t.DisabledReason))
	case !t.FailingSince.IsZero():
		return "failing since " + t.FailingSince.UTC().Format("2006-01-02T15:04:05Z")
	}
	return "enabled"
}

// FormatLife is formatLife for the CLI.
func FormatLife(t Target) string { return formatLife(t) }

func oneLineReason(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 100 {
		s = s[:100] + "…"
	}
	return s
}

// TargetChanged passes e to every observer that is a runlog.TargetObserver.
func (o observers) TargetChanged(e runlog.TargetEvent) {
	for _, ob := range o {
		if to, ok := ob.(runlog.TargetObserver); ok {
			to.TargetChanged(e)
		}
	}
}
