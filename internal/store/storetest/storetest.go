// Package storetest holds helpers the tests of the stores share.
package storetest

import "github.com/runlog/runlog/internal/state"

// JobView is what a store's List shows of a job, with the spec by value and
// empty payloads and outputs normalized to nil, so that two stores' answers
// (or one store's before and after a reopen) compare with reflect.DeepEqual.
type JobView struct {
	Job  state.Job
	Spec state.Spec
}

// View copies the exported fields of j into a JobView.
func View(j state.Job) JobView {
	v := JobView{Spec: *j.Spec, Job: state.Job{
		ID: j.ID, Due: j.Due, EnqueuedAt: j.EnqueuedAt, State: j.State,
		Run: &state.Run{FirstDue: j.FirstDue(), Started: j.Started(), FinishedAt: j.FinishedAt(), Fails: j.Fails(), LastError: j.LastError(), Reason: j.Reason()},
	}}
	if len(v.Spec.Payload) == 0 {
		v.Spec.Payload = nil
	}
	for _, a := range j.Attempts() {
		if len(a.Output) == 0 {
			a.Output = nil
		}
		v.Job.Run.Attempts = append(v.Job.Run.Attempts, a)
	}
	return v
}
