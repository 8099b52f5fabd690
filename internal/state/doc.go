// Package state is runlog's job state machine: the ops (one journal record
// each), their versioned binary codec, and the State they fold into.
//
// The engine works in three steps, always in this order:
//
//  1. decide: a pure decision (Admit, Settle, Orphan) reads the State and
//     returns the Op to journal, or the engine builds an OpEnqueue,
//     OpCancel or OpRetry itself;
//  2. journal: Encode the op and append it durably;
//  3. apply: State.Apply(op).
//
// Apply is a pure function of the state and the op (time and randomness are
// in the op), so replaying the journal from New rebuilds exactly the state
// the process had, including each target's breaker: OpStart runs the
// breaker's admission at its At, and each outcome op runs Breaker.Done
// with its BreakerFailed flag.
//
// Both stores share the rules through functions that work on one job, not
// on a State: the per-job decisions (AdmitJob, SettleJob, OrphanJob), Step
// (what Apply does to one job and its target's breaker for a start, a
// defer or an outcome; Apply adds the heap, index and count upkeep) and
// Planner (the claim rule: Max, the per-target limit, the bound of
// decisions per claim). The embedded store calls them through State; the
// PostgreSQL store calls them on the jobs it reads from rows.
//
// Jobs are pending in a heap ordered by (due time, id), ascending: among
// jobs due at the same time the lower id goes first. Finished jobs
// (succeeded, failed, cancelled) are kept with their Spec and reason.
//
// The record format (see Encode) starts with a format version byte, 1, so
// a later version can read or migrate these records; Decode refuses a
// version it does not know with ErrNewerFormat and anything else it did not
// write with ErrBadOp, and never panics.
//
// docs/semantics.md describes every op, formula and breaker transition.
package state
