package runlogtest

import "testing"

// Reporting returns a copy of r, with what it recorded so far, whose
// assertions report to t: the tests check the assertions' failures on a
// fake testing.TB.
func Reporting(r *Runner, t testing.TB) *Runner {
	p := &Runner{Runner: r.Runner, Clock: r.Clock, t: t}
	p.enqueued = r.Enqueued()
	return p
}
