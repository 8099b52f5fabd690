// Package report renders bench/RESULTS.md from the results of one
// benchmark run.
package report

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/runlog/runlog/bench/internal/harness"
)

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// Info is what the report says besides the numbers.
type Info struct {
	Machine Machine
	// Plan is "full" or "smoke".
	Plan string
	// Command is how the results were produced.
	Command string
	// RunlogMissing, if set, says why runlog's column is missing.
	RunlogMissing string
	// Notes are extra paragraphs (the workloads' sizes, deviations).
	Notes []string
	// Servers describes the servers started for the run.
	Servers []string
	// Analysis is Markdown written by hand about the numbers of this run
	// (bench/ANALYSIS.md); empty for none.
	Analysis string
}

// runlogLabel is the configuration the ratios are taken against.
const runlogLabel = "runlog"

// The bar of issue 7.
const (
	barRatio   = 10.0
	barRecover = 1.0 // seconds
)

// The bar of issue 9: runlog on PostgreSQL against River on PostgreSQL.
const (
	pgLabel      = "runlog-pg"
	pgSystem     = "runlog-pg"
	pgPeer       = "river-pg"
	pgBarRatio   = 1.5
	pgBarRecover = 10.0 // seconds
)

// isRunlog reports whether system is one of runlog's, not a peer.
func isRunlog(system string) bool { return system == "runlog" || system == pgSystem }

// results indexes runs by workload, concurrency and label.
type results struct {
	all    []harness.Result
	labels []string // in first-seen order
}

func index(rs []harness.Result) *results {
	x := &results{}
	seen := map[string]int{}
	for _, r := range rs {
		k := key(r.Workload, r.Concurrency, r.Label)
		if i, dup := seen[k]; dup {
			x.all[i] = r // the last run of a configuration wins
			continue
		}
		seen[k] = len(x.all)
		x.all = append(x.all, r)
		if !slices.Contains(x.labels, r.Label) {
			x.labels = append(x.labels, r.Label)
		}
	}
	// runlog's configurations first, then the peers in the order run.
	slices.SortStableFunc(x.labels, func(a, b string) int {
		ra, rb := strings.HasPrefix(a, runlogLabel), strings.HasPrefix(b, runlogLabel)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return 0
	})
	return x
}

func key(w string, conc int, label string) string { return fmt.Sprintf("%s/%d/%s", w, conc, label) }

// of returns the runs of workload w (and concurrency conc, unless 0) in
// label order.
func (x *results) of(w string, conc int) []harness.Result {
	var out []harness.Result
	for _, l := range x.labels {
		for _, r := range x.all {
			if r.Label == l && r.Workload == w && (conc == 0 || r.Concurrency == conc) {
				out = append(out, r)
			}
		}
	}
	return out
}

func (x *results) concurrencies(w string) []int {
	var out []int
	for _, r := range x.all {
		if r.Workload == w && !slices.Contains(out, r.Concurrency) {
			out = append(out, r.Concurrency)
		}
	}
	slices.Sort(out)
	return out
}

// find returns the run of label in rs.
func find(rs []harness.Result, label string) (harness.Result, bool) {
	for _, r := range rs {
		if r.Label == label && r.Error == "" {
			return r, true
		}
	}
	return harness.Result{}, false
}

// best returns the peer run (not runlog) with the highest metric among
// the durable configurations, or among the weakly durable ones when weak.
func best(rs []harness.Result, metric func(harness.Result) float64, weak bool) (harness.Result, bool) {
	var b harness.Result
	found := false
	for _, r := range rs {
		if isRunlog(r.System) || r.Error != "" || (r.WeakDurability != "") != weak {
			continue
		}
		if !found || metric(r) > metric(b) {
			b, found = r, true
		}
	}
	return b, found
}

// Ratio formats a/b as "12.3×", or "—" when either is unknown.
func Ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	r := a / b
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f×", r)
	case r >= 10:
		return fmt.Sprintf("%.1f×", r)
	default:
		return fmt.Sprintf("%.2f×", r)
	}
}

// num formats a rate or count for a table.
// processCell is W1's processing rate, and, when the run was repeated, the
// range of the runs it is the median of.
func processCell(r harness.Result) string {
	if len(r.ProcessRates) < 2 {
		return num(r.ProcessRate)
	}
	return fmt.Sprintf("%s (%d runs: %s–%s)", num(r.ProcessRate), len(r.ProcessRates), num(slices.Min(r.ProcessRates)), num(slices.Max(r.ProcessRates)))
}

func num(v float64) string {
	switch {
	case v <= 0:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func secs(v float64) string {
	if v < 0 {
		return "not within window"
	}
	return fmt.Sprintf("%.2f s", v)
}

func mib(kib int64) string {
	if kib <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f MiB", float64(kib)/1024)
}

// onceCell says whether every job ran exactly once.
func onceCell(r harness.Result) string {
	if r.Missing == 0 && r.Duplicates == 0 && r.ExtraAttempts == 0 {
		return "yes"
	}
	return fmt.Sprintf("NO: %d missing, %d twice, %d extra attempts", r.Missing, r.Duplicates, r.ExtraAttempts)
}

// Render returns RESULTS.md for the results rs.
func Render(rs []harness.Result, info Info) string {
	x := index(rs)
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	p("# runlog benchmark: runlog side by side with River, goqite and asynq\n\n")
	p("Produced by `%s` (plan **%s**) on %s. Every number below comes from that one run; rerun the command to reproduce. ", info.Command, info.Plan, info.Machine.Date)
	p("Each system/workload ran in its own child process; peak RSS is that process's (servers not included).\n\n")
	if info.RunlogMissing != "" {
		p("> **runlog's column is missing:** %s\n\n", info.RunlogMissing)
	}
	renderBar(&b, x)
	renderPGBar(&b, x)
	renderMachine(&b, info)

	p("## W1: enqueue, then drain\n\n")
	p("Enqueue N no-op jobs (50-byte payload) one per call from `c` goroutines with the workers stopped, start the workers and drain (processing jobs/s = N ÷ time from start to the last job done), then stop the workers and enqueue N more in batches of 1000 where the system has a batch call. Where a configuration ran W1 more than once (three times in the full plan: a drain takes 0.2 to 4 s, and the shared machine's speed drifts), its row is the run with the median processing rate, and the cell gives the range of all; the ratios and verdicts use the median.\n\n")
	for _, conc := range x.concurrencies(harness.W1) {
		runs := x.of(harness.W1, conc)
		rl, hasRL := find(runs, runlogLabel)
		p("### W1 at concurrency %d\n\n", conc)
		p("| system | N | enqueue jobs/s (one per call) | enqueue jobs/s (batched) | processing jobs/s | wall | peak RSS | each job once | runlog ÷ this (processing) |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---|---:|\n")
		for _, r := range runs {
			if r.Error != "" {
				p("| %s | %d | failed: %s |||||||\n", r.Label, r.N, cell(r.Error))
				continue
			}
			ratio := "—"
			if hasRL && r.Label != runlogLabel {
				ratio = Ratio(rl.ProcessRate, r.ProcessRate)
			}
			p("| %s | %d | %s | %s | %s | %.1f s | %s | %s | %s |\n", r.Label, r.N, num(r.EnqueueRate), num(r.EnqueueBatchRate), processCell(r), r.WallSeconds, mib(r.MaxRSSKiB), onceCell(r), ratio)
		}
		p("\n")
	}

	if runs := x.of(harness.W2, 0); len(runs) > 0 {
		rl, hasRL := find(runs, runlogLabel)
		p("## W2: producers and consumers at once\n\n")
		p("%d producers each enqueue one job per call while the workers (concurrency %d) run them, for %.0f s. A producer waits while %d jobs are enqueued and not yet done, so the latency is the system's, not an ever-growing backlog's; at saturation its median is close to that bound ÷ the throughput (Little's law). Latency is from just before the enqueue call to the start of the job body.\n\n", runs[0].Producers, runs[0].Concurrency, runs[0].DurationSeconds, runs[0].Outstanding)
		p("| system | completed jobs/s | p50 enqueue→start | p99 enqueue→start | peak RSS | runlog ÷ this (jobs/s) |\n")
		p("|---|---:|---:|---:|---:|---:|\n")
		for _, r := range runs {
			if r.Error != "" {
				p("| %s | failed: %s |||||\n", r.Label, cell(r.Error))
				continue
			}
			ratio := "—"
			if hasRL && r.Label != runlogLabel {
				ratio = Ratio(rl.CompleteRate, r.CompleteRate)
			}
			p("| %s | %s | %.2f ms | %.2f ms | %s | %s |\n", r.Label, num(r.CompleteRate), r.P50Millis, r.P99Millis, mib(r.MaxRSSKiB), ratio)
		}
		p("\n")
	}

	if runs := x.of(harness.W2Paced, 0); len(runs) > 0 {
		p("### W2 paced: %.0f jobs/s, a rate every system keeps up with\n\n", runs[0].PacedRate)
		p("The same, for %.0f s, but %d producers together enqueue only %.0f jobs per second: the latency is then the system's dispatch delay (polling, wake-ups, commits), not queueing.\n\n", runs[0].DurationSeconds, runs[0].Producers, runs[0].PacedRate)
		p("| system | completed jobs/s | p50 enqueue→start | p99 enqueue→start |\n")
		p("|---|---:|---:|---:|\n")
		for _, r := range runs {
			if r.Error != "" {
				p("| %s | failed: %s |||\n", r.Label, cell(r.Error))
				continue
			}
			p("| %s | %s | %.2f ms | %.2f ms |\n", r.Label, num(r.CompleteRate), r.P50Millis, r.P99Millis)
		}
		p("\n")
	}

	if runs := x.of(harness.W3, 0); len(runs) > 0 {
		rl, hasRL := find(runs, runlogLabel)
		p("## W3: jobs that fail twice, then succeed (N = %d, concurrency %d)\n\n", firstN(runs), runs[0].Concurrency)
		p("Every job returns an error on its first two attempts; each system uses the smallest retry backoff it allows (see the settings). jobs/s = N ÷ time from starting the workers to the last success; then the harness watches 0.5 s more for late duplicates.\n\n")
		p("| system | jobs/s | all completed exactly once, after exactly 3 attempts | wall | runlog ÷ this |\n")
		p("|---|---:|---|---:|---:|\n")
		for _, r := range runs {
			if r.Error != "" {
				p("| %s | failed: %s ||||\n", r.Label, cell(r.Error))
				continue
			}
			ratio := "—"
			if hasRL && r.Label != runlogLabel {
				ratio = Ratio(rl.CompleteRate, r.CompleteRate)
			}
			p("| %s | %s | %s | %.1f s | %s |\n", r.Label, num(r.CompleteRate), onceCell(r), r.WallSeconds, ratio)
		}
		p("\n")
	}

	if runs := x.of(harness.W4, 0); len(runs) > 0 {
		p("## W4: kill -9 of the worker midway, then restart (N = %d, concurrency %d)\n\n", firstN(runs), runs[0].Concurrency)
		p("The worker process enqueues N jobs, runs them (each body sleeps %s so that jobs are in flight) and appends the job id to a ledger file (O_APPEND) before and after each body. The harness kills it with SIGKILL once half the jobs are done, restarts it, and watches the ledger until every job ran or the window passed. *In flight* = bodies started and not finished at the kill. *Not run* = jobs with no finished body when the window closed (for a system that rescues later than the window, these are late, not necessarily lost forever). *Ran twice* = jobs whose body finished twice (at-least-once delivery).\n\n", time.Duration(runs[0].BodyMillis*float64(time.Millisecond)))
		p("| system | in flight at kill | not run by window end | ran twice | jobs started before the kill all ran again after | all jobs done after | window | peak RSS |\n")
		p("|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range runs {
			if r.Error != "" {
				p("| %s | failed: %s |||||||\n", r.Label, cell(r.Error))
				continue
			}
			p("| %s | %d | %d | %d | %s | %s | %.0f s | %s |\n", r.Label, r.Interrupted, r.Lost, r.Twice, secs(r.RecoverSeconds), secs(r.AllDoneSeconds), r.WindowSeconds, mib(r.MaxRSSKiB))
		}
		p("\n")
	}

	if info.Analysis != "" {
		p("## Analysis\n\n%s\n\n", strings.TrimSpace(info.Analysis))
	}
	renderSettings(&b, x)
	renderProblems(&b, x)
	if len(info.Notes) > 0 {
		p("## Notes\n\n")
		for _, n := range info.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return b.String()
}

func firstN(rs []harness.Result) int {
	for _, r := range rs {
		if r.N > 0 {
			return r.N
		}
	}
	return 0
}

// cell makes text safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "/")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func renderBar(b *strings.Builder, x *results) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## The bar (issue 7)\n\n")
	p("runlog ≥ %.0f× the best peer on W1 processing at concurrency 256 and on W2, with durability on (the peers' too: the verdicts leave out the configurations that can lose acknowledged jobs, which get a line of their own); zero jobs lost in W4, every interrupted job running again within %.0f s of the restart.\n\n", barRatio, barRecover)
	check := func(name string, runs []harness.Result, metric func(harness.Result) float64, unit string) {
		rl, ok := find(runs, runlogLabel)
		if weak, okWeak := best(runs, metric, true); ok && okWeak {
			defer p("  - against %s (%s): %s.\n", weak.Label, weak.WeakDurability, Ratio(metric(rl), metric(weak)))
		}
		peer, okPeer := best(runs, metric, false)
		switch {
		case !ok:
			p("- **%s:** runlog did not run; no verdict.\n", name)
		case !okPeer:
			p("- **%s:** runlog %s %s; no peer result to compare.\n", name, num(metric(rl)), unit)
		default:
			r := metric(rl) / metric(peer)
			verdict := "**met**"
			if r < barRatio {
				verdict = fmt.Sprintf("**not met**: short by a factor of %.2f (runlog would need %s %s)", barRatio/r, num(barRatio*metric(peer)), unit)
			}
			p("- **%s:** runlog %s %s vs best peer %s %s %s = %s; %s.\n", name, num(metric(rl)), unit, peer.Label, num(metric(peer)), unit, Ratio(metric(rl), metric(peer)), verdict)
		}
	}
	check("W1 processing at 256", x.of(harness.W1, 256), func(r harness.Result) float64 { return r.ProcessRate }, "jobs/s")
	check("W2 completed", x.of(harness.W2, 0), func(r harness.Result) float64 { return r.CompleteRate }, "jobs/s")
	for _, r := range x.of(harness.W4, 0) {
		if r.System != "runlog" {
			continue
		}
		if r.Error != "" {
			p("- **W4 (%s):** failed: %s\n", r.Label, cell(r.Error))
			continue
		}
		ok := r.Lost == 0 && r.RecoverSeconds >= 0 && r.RecoverSeconds <= barRecover
		verdict := "**met**"
		if !ok {
			verdict = "**not met**"
		}
		again := "had not all run again by then"
		if r.RecoverSeconds >= 0 {
			again = fmt.Sprintf("had all run again %.2f s after the restart", r.RecoverSeconds)
		}
		p("- **W4 (%s):** %d of %d jobs not run by the end of the %.0f s window; the jobs started before the kill (%d in flight, %d finished but run again) %s; %s.\n",
			r.Label, r.Lost, r.N, r.WindowSeconds, r.Interrupted, r.Twice, again, verdict)
	}
	p("\n")
}

// renderPGBar states the verdicts of issue 9: runlog-pg against the best
// River-on-PostgreSQL configuration on W1 processing (at 256 and at 16)
// and W2, and runlog-pg's W4 rescue time. It says nothing when runlog-pg
// did not run.
func renderPGBar(b *strings.Builder, x *results) {
	if !slices.ContainsFunc(x.all, func(r harness.Result) bool { return r.System == pgSystem }) {
		return
	}
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## The bar of issue 9: runlog on PostgreSQL\n\n")
	p("runlog-pg (postgres.Open on the same PostgreSQL server, fsync=on, synchronous_commit=on) ≥ %.1f× the best River-on-PostgreSQL configuration on W1 processing and on W2; in W4, every job a killed node held runs again within %.0f s (River's default rescues stuck jobs after 1 h).\n\n", pgBarRatio, pgBarRecover)
	check := func(name string, runs []harness.Result, metric func(harness.Result) float64, unit string) {
		pg, ok := find(runs, pgLabel)
		var peers []harness.Result
		for _, r := range runs {
			if r.System == pgPeer && r.Error == "" {
				peers = append(peers, r)
			}
		}
		switch {
		case !ok:
			p("- **%s:** runlog-pg did not run (or failed); no verdict.\n", name)
			return
		case len(peers) == 0:
			p("- **%s:** runlog-pg %s %s; no River-on-PostgreSQL result to compare.\n", name, num(metric(pg)), unit)
			return
		}
		bestPeer := peers[0]
		var each []string
		for _, r := range peers {
			if metric(r) > metric(bestPeer) {
				bestPeer = r
			}
			each = append(each, fmt.Sprintf("%s %s (%s)", r.Label, num(metric(r)), Ratio(metric(pg), metric(r))))
		}
		ratio := metric(pg) / metric(bestPeer)
		verdict := "**met**"
		if ratio < pgBarRatio {
			verdict = fmt.Sprintf("**not met**: short by a factor of %.2f (runlog-pg would need %s %s)", pgBarRatio/ratio, num(pgBarRatio*metric(bestPeer)), unit)
		}
		p("- **%s:** runlog-pg %s %s vs best River-PG %s %s %s = %s; %s. Each River-PG configuration: %s.\n",
			name, num(metric(pg)), unit, bestPeer.Label, num(metric(bestPeer)), unit, Ratio(metric(pg), metric(bestPeer)), verdict, strings.Join(each, ", "))
	}
	process := func(r harness.Result) float64 { return r.ProcessRate }
	check("W1 processing at 256", x.of(harness.W1, 256), process, "jobs/s")
	check("W1 processing at 16", x.of(harness.W1, 16), process, "jobs/s")
	check("W2 completed", x.of(harness.W2, 0), func(r harness.Result) float64 { return r.CompleteRate }, "jobs/s")
	for _, r := range x.of(harness.W4, 0) {
		if r.System != pgSystem && r.System != pgPeer {
			continue
		}
		if r.Error != "" {
			p("- **W4 (%s):** failed: %s\n", r.Label, cell(r.Error))
			continue
		}
		again := fmt.Sprintf("had not all run again by the end of the %.0f s window", r.WindowSeconds)
		if r.RecoverSeconds >= 0 {
			again = fmt.Sprintf("had all run again %.2f s after the restart", r.RecoverSeconds)
		}
		verdict := ""
		if r.System == pgSystem {
			verdict = "; **met**"
			if r.Lost > 0 || r.RecoverSeconds < 0 || r.RecoverSeconds > pgBarRecover {
				verdict = "; **not met**"
			}
		}
		p("- **W4 (%s):** the jobs started before the kill (%d in flight, %d finished but run again) %s; %d of %d jobs not run by the window's end%s.\n",
			r.Label, r.Interrupted, r.Twice, again, r.Lost, r.N, verdict)
	}
	p("\n")
}

func renderMachine(b *strings.Builder, info Info) {
	m := info.Machine
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Machine\n\n")
	p("| | |\n|---|---|\n")
	p("| CPUs (nproc) | %d × %s |\n", m.CPUs, m.CPUModel)
	p("| memory | %s |\n", m.Memory)
	p("| disk (data directories) | %s |\n", m.Disk)
	p("| fdatasync of 4 KiB | p50 %.0f µs, p99 %.0f µs |\n", m.FsyncP50Micros, m.FsyncP99Micros)
	p("| kernel | %s |\n", m.Kernel)
	p("| Go | %s |\n", m.GoVersion)
	for _, s := range info.Servers {
		p("| server | %s |\n", s)
	}
	for _, mod := range m.Modules {
		p("| module | %s %s |\n", mod.Name, mod.Value)
	}
	p("\n")
}

// renderSettings lists, per configuration, the settings its runs
// reported; a setting that differed between workloads says which.
func renderSettings(b *strings.Builder, x *results) {
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }
	p("## Settings in effect\n\n")
	p("A setting followed by workloads in parentheses applies to those workloads only.\n\n")
	p("*default* = the system's own defaults; *tuned* = its polling tuned for speed. Durability is on everywhere: runlog fdatasyncs each group commit, PostgreSQL runs with fsync=on and synchronous_commit=on, SQLite with WAL and synchronous=FULL, Redis with appendonly yes and appendfsync always (the *asynq-everysec* rows: everysec, which can lose up to a second of acknowledged jobs on a power cut).\n\n")
	for _, label := range x.labels {
		type occ struct {
			value     string
			workloads []string
		}
		var names, all []string
		vals := map[string][]occ{}
		for _, r := range x.all {
			if r.Label != label {
				continue
			}
			if !slices.Contains(all, r.Workload) {
				all = append(all, r.Workload)
			}
			for _, s := range r.Settings {
				if _, ok := vals[s.Name]; !ok {
					names = append(names, s.Name)
				}
				os := vals[s.Name]
				i := slices.IndexFunc(os, func(o occ) bool { return o.value == s.Value })
				if i < 0 {
					os = append(os, occ{value: s.Value})
					i = len(os) - 1
				}
				if !slices.Contains(os[i].workloads, r.Workload) {
					os[i].workloads = append(os[i].workloads, r.Workload)
				}
				vals[s.Name] = os
			}
		}
		if len(names) == 0 {
			continue
		}
		p("- **%s**: ", label)
		var parts []string
		for _, n := range names {
			os := vals[n]
			if len(os) == 1 && len(os[0].workloads) == len(all) {
				parts = append(parts, fmt.Sprintf("%s = %s", n, os[0].value))
				continue
			}
			var vs []string
			for _, o := range os {
				vs = append(vs, fmt.Sprintf("%s (%s)", o.value, strings.Join(o.workloads, ", ")))
			}
			parts = append(parts, fmt.Sprintf("%s = %s", n, strings.Join(vs, "; ")))
		}
		p("%s\n", strings.Join(parts, "; "))
	}
	p("\n")
}

func renderProblems(b *strings.Builder, x *results) {
	var lines []string
	for _, r := range x.all {
		if r.Error != "" {
			lines = append(lines, fmt.Sprintf("- %s %s c=%d failed: %s", r.Label, r.Workload, r.Concurrency, cell(r.Error)))
		}
		for _, n := range r.Notes {
			lines = append(lines, fmt.Sprintf("- %s %s c=%d: %s", r.Label, r.Workload, r.Concurrency, cell(n)))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(b, "## Run notes and errors\n\n%s\n\n", strings.Join(lines, "\n"))
}
