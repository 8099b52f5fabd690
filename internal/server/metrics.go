package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/buildinfo"
	"github.com/runlog/runlog/internal/journal"
	"github.com/runlog/runlog/internal/snapshot"
	"github.com/runlog/runlog/internal/vfs"
)

// Metrics collects runlog's Prometheus metrics in a registry of its own. It
// is the runner's runlog.JobObserver (attempts, journal syncs, jobs
// enqueued and ended, breaker transitions) and reads the runner's Stats at
// each scrape (jobs by state, breakers, queue lag). Every label takes a
// bounded set of values: the target label names the busiest targets only
// (MetricsOptions.Targets), the others fold into OtherTarget.
type Metrics struct {
	reg            *prometheus.Registry
	fold           *targetFold
	attempts       *prometheus.CounterVec
	attemptSeconds *prometheus.HistogramVec
	syncSeconds    prometheus.Histogram
	batchRecords   prometheus.Histogram
	syncBytes      prometheus.Counter
	enqueued       *prometheus.CounterVec
	finished       *prometheus.CounterVec
	transitions    *prometheus.CounterVec
	httpSeconds    *prometheus.HistogramVec
	life           lifeMetrics // lifecycle.go
}

var _ runlog.JobObserver = (*Metrics)(nil)

// MetricsOptions configure NewMetrics.
type MetricsOptions struct {
	// Targets is how many targets keep their own target label (the
	// busiest, re-picked at each scrape); the rest share
	// target="other". Defaults to DefaultMetricsTargets.
	Targets int
}

// NewMetrics returns the metrics with the Go runtime and process collectors
// and runlog_build_info registered; call Watch once the runner is open.
func NewMetrics(opts MetricsOptions) *Metrics {
	if opts.Targets <= 0 {
		opts.Targets = DefaultMetricsTargets
	}
	m := &Metrics{
		reg:  prometheus.NewRegistry(),
		fold: newTargetFold(opts.Targets),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runlog_attempts_total",
			Help: "Attempts finished, by job kind, target and outcome (success, retryable, permanent, unsafe). Only the busiest targets keep their name (serve --metrics-targets); the rest count under target=\"other\".",
		}, []string{"kind", "target", "outcome"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runlog_attempt_duration_seconds",
			Help:    "How long attempts ran, by job kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"kind"}),
		syncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runlog_journal_sync_seconds",
			Help:    "Latency of one journal group commit (write and fdatasync).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		batchRecords: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runlog_journal_batch_records",
			Help:    "Records made durable by one journal sync (group commit batch size).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		syncBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runlog_journal_synced_bytes_total",
			Help: "Bytes made durable in the journal.",
		}),
		enqueued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runlog_jobs_enqueued_total",
			Help: "Jobs added, by kind (an enqueue whose key was already held adds none).",
		}, []string{"kind"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runlog_jobs_finished_total",
			Help: "Jobs that ended, by kind and end state: succeeded, failed (dead: no more attempts) or cancelled. Jobs the dispatcher fails before an attempt (a deadline or budget already spent) are not counted yet.",
		}, []string{"kind", "state"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runlog_breaker_transitions_total",
			Help: "Breaker transitions seen (looked at once a second), by the state left and the state entered (closed, open, half-open).",
		}, []string{"from", "to"}),
		httpSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runlog_http_request_duration_seconds",
			Help:    "HTTP requests served, by route (the API's path patterns, \"dashboard\" for its pages, \"unknown\" for any other path), method and status code.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10},
		}, []string{"route", "method", "code"}),
	}
	in := buildinfo.Get()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "runlog_build_info",
		Help:        "Always 1; the labels say which runlog runs: version, VCS commit and Go toolchain.",
		ConstLabels: prometheus.Labels{"version": in.Version, "commit": in.Commit, "goversion": in.Go},
	})
	buildInfo.Set(1)
	m.life = newLifeMetrics()
	m.reg.MustRegister(m.life.transitions)
	m.reg.MustRegister(m.attempts, m.attemptSeconds, m.syncSeconds, m.batchRecords, m.syncBytes,
		m.enqueued, m.finished, m.transitions, m.httpSeconds, buildInfo,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// AttemptFinished counts a finished attempt (runlog.Observer).
func (m *Metrics) AttemptFinished(e runlog.AttemptEvent) {
	m.attempts.WithLabelValues(e.Kind, m.fold.label(e.Target), e.Outcome).Inc()
	m.attemptSeconds.WithLabelValues(e.Kind).Observe(e.Duration.Seconds())
}

// JournalSynced records a journal sync (runlog.Observer).
func (m *Metrics) JournalSynced(e runlog.SyncEvent) {
	m.syncSeconds.Observe(e.Duration.Seconds())
	m.batchRecords.Observe(float64(e.Records))
	m.syncBytes.Add(float64(e.Bytes))
}

// JobsEnqueued counts added jobs (runlog.JobObserver).
func (m *Metrics) JobsEnqueued(kind string, n int) {
	m.enqueued.WithLabelValues(kind).Add(float64(n))
}

// JobFinished counts a job's end (runlog.JobObserver).
func (m *Metrics) JobFinished(e runlog.JobEvent) {
	m.finished.WithLabelValues(e.Kind, string(e.State)).Inc()
}

// BreakerChanged counts a breaker transition (runlog.JobObserver).
func (m *Metrics) BreakerChanged(e runlog.BreakerEvent) {
	m.transitions.WithLabelValues(e.From, e.To).Inc()
}

// Watch registers the gauges read from r's Stats at each scrape.
func (m *Metrics) Watch(r *runlog.Runner) {
	m.reg.MustRegister(statsCollector{r: r, m: m})
}

// WatchDir registers the gauges of the data directory's disk use, read at
// each scrape: runlog_journal_bytes (the segment files) and
// runlog_snapshot_bytes (the snapshot files).
func (m *Metrics) WatchDir(dir string) {
	m.reg.MustRegister(dirCollector{dir: dir})
}

// DiskCheckInterval is how often WatchDisk looks at the free space.
const DiskCheckInterval = 10 * time.Second

// WatchDisk registers the gauge runlog_journal_disk_free_bytes, the bytes
// an unprivileged process may still write on the filesystem of dir (the data
// directory), read with statfs at each scrape, and checks it every
// DiskCheckInterval: below warnBelow bytes it logs a warning (again each
// time the free space halves), and an info line once it is back above. A
// journal whose disk fills up fails, and the server must then be
// restarted, so the warning comes while there is room to act. Call the
// returned func to stop the checks.
func (m *Metrics) WatchDisk(dir string, warnBelow int64, log *slog.Logger) (stop func()) {
	m.reg.MustRegister(diskCollector{dir: dir})
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w := diskWarner{dir: dir, below: warnBelow, log: log}
		t := time.NewTicker(DiskCheckInterval)
		defer t.Stop()
		for {
			w.check()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
	}
}

// diskFree returns the bytes an unprivileged process may still write on the
// filesystem holding dir.
func diskFree(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// diskWarner logs when the free space on dir's filesystem falls below
// below, again each time it halves, and once when it is back above.
type diskWarner struct {
	dir    string
	below  int64
	log    *slog.Logger
	warned int64 // free bytes at the last warning; 0: none since it was fine
}

// check reads the free space once and logs if it crossed a mark.
func (w *diskWarner) check() {
	free, err := diskFree(w.dir)
	if err != nil {
		w.log.Warn("runlog: cannot read the free disk space of the data directory", "err", err)
		return
	}
	switch {
	case free < w.below && (w.warned == 0 || free <= w.warned/2):
		w.warned = max(free, 1)
		w.log.Warn("runlog: the data directory's disk is nearly full; free disk space now: once a journal write finds no room the journal fails, /healthz answers 503 and the server must be restarted",
			"dir", w.dir, "free_bytes", free, "warn_below_bytes", w.below)
	case free >= w.below && w.warned != 0:
		w.warned = 0
		w.log.Info("runlog: the data directory's disk has room again", "dir", w.dir, "free_bytes", free)
	}
}

var descDiskFree = prometheus.NewDesc("runlog_journal_disk_free_bytes",
	"Bytes still free (for unprivileged writers) on the filesystem of the data directory, from statfs.", nil, nil)

// diskCollector reads the free space of dir's filesystem at scrape time.
type diskCollector struct{ dir string }

// Describe sends the descriptor of the free-space gauge (prometheus.Collector).
func (c diskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descDiskFree }

// Collect reads the free space and sends the gauge (prometheus.Collector).
func (c diskCollector) Collect(ch chan<- prometheus.Metric) {
	free, err := diskFree(c.dir)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descDiskFree, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descDiskFree, prometheus.GaugeValue, float64(free))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry returns the registry the metrics live in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

var (
	descJobs = prometheus.NewDesc("runlog_jobs",
		"Jobs by state.", []string{"state"}, nil)
	descPool = prometheus.NewDesc("runlog_pool_size",
		"How many attempts may run at once.", nil, nil)
	descInFlight = prometheus.NewDesc("runlog_attempts_in_flight",
		"Attempts running now.", nil, nil)
	descLag = prometheus.NewDesc("runlog_queue_lag_seconds",
		"How long the oldest due job has waited past its due time.", nil, nil)
	descBreakers = prometheus.NewDesc("runlog_breakers",
		"Targets whose breaker is in each state (closed, open, half-open; an open breaker past its cooldown counts as half-open), over every target.", []string{"state"}, nil)
	descBreaker = prometheus.NewDesc("runlog_breaker_state",
		"1 for the state each named target's breaker is in (closed, open, half-open), 0 for the others; for target=\"other\", how many of the folded targets are in each state.", []string{"target", "state"}, nil)
	descTargetFailures = prometheus.NewDesc("runlog_breaker_recent_failures",
		"Failures in each target breaker's window (target=\"other\": the sum over the folded targets).", []string{"target"}, nil)
	descTargetJobs = prometheus.NewDesc("runlog_target_jobs",
		"Pending and running jobs per target (target=\"other\": the sum over the folded targets).", []string{"target", "state"}, nil)
	descTargetRate = prometheus.NewDesc("runlog_target_rate_limit",
		"The rate limit in force per named target, in attempts per second (only targets with a limit).", []string{"target"}, nil)
	descTargetTokens = prometheus.NewDesc("runlog_target_tokens",
		"The tokens in each named target's rate limit bucket (only targets with a limit).", []string{"target"}, nil)
	descTargetHold = prometheus.NewDesc("runlog_target_hold_seconds",
		"How long each named target's own wait (a Retry-After) still holds its jobs, in seconds (only held targets).", []string{"target"}, nil)
	descTargetRamp = prometheus.NewDesc("runlog_target_ramp_window",
		"The attempts each named target may run at once during its slow start after an outage (only ramping targets).", []string{"target"}, nil)
	breakerStates = []string{"closed", "open", "half-open"}
	descQueueJobs = prometheus.NewDesc("runlog_queue_jobs",
		"Pending and running jobs per queue.", []string{"queue", "state"}, nil)
	descQueuePaused = prometheus.NewDesc("runlog_queue_paused",
		"1 for a paused queue, 0 for the others.", []string{"queue"}, nil)
	descQueueConcurrency = prometheus.NewDesc("runlog_queue_concurrency",
		"Each queue's bound on its attempts in flight (0: only the pool bounds them).", []string{"queue"}, nil)
	descQueueRate = prometheus.NewDesc("runlog_queue_rate_limit",
		"Each queue's rate limit, in attempts per second (only queues with a limit).", []string{"queue"}, nil)
	descQueueTokens = prometheus.NewDesc("runlog_queue_tokens",
		"The tokens in each queue's rate limit bucket (only queues with a limit).", []string{"queue"}, nil)
)

// statsCollector turns the runner's Stats into gauges at scrape time, and
// picks the targets that keep their label for the next interval.
type statsCollector struct {
	r *runlog.Runner
	m *Metrics
}

// Describe sends the descriptors of the Stats gauges (prometheus.Collector).
func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descPool, descInFlight, descLag, descBreakers, descBreaker, descTargetFailures, descTargetJobs,
		descQueueJobs, descQueuePaused, descQueueConcurrency, descQueueRate, descQueueTokens, descTargetRate, descTargetTokens, descTargetHold, descTargetRamp, descDisabled} {
		ch <- d
	}
}

// Collect reads the runner's Stats once and sends the gauges.
func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.r.Stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descJobs, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, st := range []struct {
		state string
		n     int
	}{
		{"pending", s.Pending}, {"running", s.Running}, {"succeeded", s.Succeeded},
		{"failed", s.Failed}, {"cancelled", s.Cancelled},
	} {
		gauge(descJobs, float64(st.n), st.state)
	}
	gauge(descPool, float64(s.PoolSize))
	gauge(descInFlight, float64(s.InFlight))
	gauge(descLag, queueLag(s.OldestDue, time.Now()).Seconds())
	collectDisabled(ch, s)
	for _, q := range s.Queues {
		gauge(descQueueJobs, float64(q.Pending), q.Name, "pending")
		gauge(descQueueJobs, float64(q.Running), q.Name, "running")
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		gauge(descQueuePaused, paused, q.Name)
		gauge(descQueueConcurrency, float64(q.Concurrency), q.Name)
		if q.Limit != (runlog.Limit{}) {
			gauge(descQueueRate, q.Limit.Rate, q.Name)
			gauge(descQueueTokens, float64(q.Tokens), q.Name)
		}
	}

	named, dropped := c.m.fold.pick(s.Targets)
	for _, t := range dropped {
		c.m.attempts.DeletePartialMatch(prometheus.Labels{"target": t})
	}
	byState := map[string]int{}
	var other struct {
		states                     map[string]int
		failures, pending, running int
		any                        bool
	}
	other.states = map[string]int{}
	for _, t := range s.Targets {
		byState[t.State]++
		if !named[t.Target] || t.Target == OtherTarget {
			other.any = true
			other.states[t.State]++
			other.failures += t.RecentFailures
			other.pending += t.Pending
			other.running += t.Running
			continue
		}
		for _, state := range breakerStates {
			v := 0.0
			if t.State == state {
				v = 1
			}
			gauge(descBreaker, v, t.Target, state)
		}
		gauge(descTargetFailures, float64(t.RecentFailures), t.Target)
		gauge(descTargetJobs, float64(t.Pending), t.Target, "pending")
		gauge(descTargetJobs, float64(t.Running), t.Target, "running")
		if t.Limit != (runlog.Limit{}) {
			gauge(descTargetRate, t.Limit.Rate, t.Target)
			gauge(descTargetTokens, float64(t.Tokens), t.Target)
		}
		if !t.HoldUntil.IsZero() {
			gauge(descTargetHold, max(time.Until(t.HoldUntil).Seconds(), 0), t.Target)
		}
		if t.RampWindow > 0 {
			gauge(descTargetRamp, float64(t.RampWindow), t.Target)
		}
	}
	for _, state := range breakerStates {
		gauge(descBreakers, float64(byState[state]), state)
	}
	if other.any {
		for _, state := range breakerStates {
			gauge(descBreaker, float64(other.states[state]), OtherTarget, state)
		}
		gauge(descTargetFailures, float64(other.failures), OtherTarget)
		gauge(descTargetJobs, float64(other.pending), OtherTarget, "pending")
		gauge(descTargetJobs, float64(other.running), OtherTarget, "running")
	}
}

var (
	descJournalBytes = prometheus.NewDesc("runlog_journal_bytes",
		"Bytes of the journal's segment files in the data directory (preallocated segments count in full).", nil, nil)
	descSnapshotBytes = prometheus.NewDesc("runlog_snapshot_bytes",
		"Bytes of the snapshot files in the data directory.", nil, nil)
)

// dirCollector reads the disk use of a data directory at scrape time.
type dirCollector struct{ dir string }

// Describe sends the descriptors of the disk-use gauges (prometheus.Collector).
func (c dirCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descJournalBytes
	ch <- descSnapshotBytes
}

// Collect sums the sizes of the segment and snapshot files (prometheus.Collector).
func (c dirCollector) Collect(ch chan<- prometheus.Metric) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descJournalBytes, err)
		return
	}
	var journalBytes, snapBytes int64
	snaps, err := snapshot.List(vfs.OS{}, c.dir)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descSnapshotBytes, err)
		return
	}
	isSnap := make(map[string]bool, len(snaps))
	for _, in := range snaps {
		isSnap[filepath.Base(in.Path)] = true
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !(journal.IsSegment(e.Name()) || isSnap[e.Name()]) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed since the listing (a snapshot dropped segments)
		}
		if isSnap[e.Name()] {
			snapBytes += fi.Size()
		} else {
			journalBytes += fi.Size()
		}
	}
	ch <- prometheus.MustNewConstMetric(descJournalBytes, prometheus.GaugeValue, float64(journalBytes))
	ch <- prometheus.MustNewConstMetric(descSnapshotBytes, prometheus.GaugeValue, float64(snapBytes))
}
