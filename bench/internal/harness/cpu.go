package harness

import "github.com/runlog/runlog/internal/cpuclock"

// cpuMark is the CPU time spent up to an instant (cpuclock.Read); ok is
// false where it cannot be read.
type cpuMark struct {
	m  cpuclock.Mark
	ok bool
}

// markCPU reads the CPU time spent so far.
func markCPU() cpuMark {
	m, ok := cpuclock.Read()
	return cpuMark{m, ok}
}

// perJob fills r's CPU a job from m to end over jobs jobs.
func (m cpuMark) perJob(end cpuMark, jobs int, r *Result) {
	if !m.ok || !end.ok {
		return
	}
	r.MachineCPUPerJobUS, r.ProcessCPUPerJobUS = m.m.PerJob(end.m, jobs)
}
