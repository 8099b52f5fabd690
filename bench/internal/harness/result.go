package harness

// Result is one run of one workload against one system, as the child
// process prints it (one JSON object per line) and the report reads it.
type Result struct {
	// Label names the system's configuration in the report, e.g.
	// "river-pg (tuned)".
	Label    string `json:"label"`
	System   string `json:"system"`
	Mode     Mode   `json:"mode"`
	Workload string `json:"workload"`
	// WeakDurability, if set, says how this configuration can lose
	// acknowledged jobs (e.g. Redis with appendfsync everysec); the bar
	// compares runlog with the durable configurations only.
	WeakDurability string `json:"weak_durability,omitempty"`
	// Concurrency is the number of jobs the system may run at once.
	Concurrency int `json:"concurrency"`
	// N is the number of jobs (W1, W3, W4).
	N int `json:"n,omitempty"`

	// W1.
	EnqueueRate      float64 `json:"enqueue_rate,omitempty"`       // jobs/s, one per call
	EnqueueBatchRate float64 `json:"enqueue_batch_rate,omitempty"` // jobs/s, batched; 0 = no batch API
	ProcessRate      float64 `json:"process_rate,omitempty"`       // jobs/s, drain
	// ProcessRates holds, when the workload ran more than once for this
	// configuration, every run's ProcessRate in run order; the result is
	// then the run with the median one.
	ProcessRates []float64 `json:"process_rates,omitempty"`
	WallSeconds  float64   `json:"wall_seconds,omitempty"` // whole workload

	// W2: the producers and the bound on jobs enqueued and not yet done.
	Producers   int `json:"producers,omitempty"`
	Outstanding int `json:"outstanding,omitempty"`
	// PacedRate is the enqueue rate of W2-paced, in jobs/s.
	PacedRate float64 `json:"paced_rate,omitempty"`
	// DurationSeconds is how long producers and consumers ran together.
	DurationSeconds float64 `json:"duration_seconds,omitempty"`

	// W2 and W3.
	Completed    int     `json:"completed,omitempty"`
	CompleteRate float64 `json:"complete_rate,omitempty"` // jobs/s
	P50Millis    float64 `json:"p50_ms,omitempty"`
	P99Millis    float64 `json:"p99_ms,omitempty"`

	// W1 and W3: exactly-once accounting.
	Missing    int `json:"missing"`    // jobs that never succeeded
	Duplicates int `json:"duplicates"` // jobs that succeeded more than once
	// ExtraAttempts counts attempts beyond the ones the workload asked for
	// (W3: more than 3 for a job).
	ExtraAttempts int `json:"extra_attempts"`

	// W4.
	Lost        int `json:"lost"`
	Twice       int `json:"twice"`
	Interrupted int `json:"interrupted"` // bodies started, not finished, at the kill
	// RecoverSeconds is how long after the restart the last job that had
	// started before the kill (in flight, or finished but not recorded by
	// the system) ran again; -1 when a job in flight at the kill had not
	// run again within the window.
	RecoverSeconds float64 `json:"recover_seconds"`
	// AllDoneSeconds is how long after the restart every job had run; -1
	// when that did not happen within the window.
	AllDoneSeconds float64 `json:"all_done_seconds,omitempty"`
	// WindowSeconds is how long the harness waited after the restart.
	WindowSeconds float64 `json:"window_seconds,omitempty"`
	// BodyMillis is how long each W4 job body took.
	BodyMillis float64 `json:"body_ms,omitempty"`

	// MachineCPUPerJobUS and ProcessCPUPerJobUS are the CPU time spent
	// per job over the measured window (W1's drain, W2's window, W3's
	// drain), in microseconds: by the whole machine (the system's server
	// included when it runs here) and by the process that ran the jobs.
	// Zero where they cannot be read.
	MachineCPUPerJobUS float64 `json:"machine_cpu_us_per_job,omitempty"`
	ProcessCPUPerJobUS float64 `json:"process_cpu_us_per_job,omitempty"`

	// MaxRSSKiB is the peak resident set of the process that ran the jobs
	// (servers not included).
	MaxRSSKiB int64 `json:"max_rss_kib,omitempty"`
	// Settings are the durability and polling settings in effect.
	Settings []Setting `json:"settings,omitempty"`
	// Notes explain anything unusual about the run.
	Notes []string `json:"notes,omitempty"`
	// Error is set when the run failed; its numbers are then partial.
	Error string `json:"error,omitempty"`
}
