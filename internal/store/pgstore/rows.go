package pgstore

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/jsonscan"
	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// A job's row is read into a jobRow: a state.Job (so that the rules of
// package state, state.Step and the decisions, apply to it as they do to
// the embedded store's jobs) plus what only this store keeps, the node of
// each attempt (for fencing). Its history is two columns: history, the
// attempts before the latest as a JSON array, and latest, the latest
// attempt as JSON (a start writes it whole, without editing the array on
// the server).

// attempt is one entry of a job's history as stored in the history and
// latest columns: a state.Attempt plus the node that ran it.
type attempt struct {
	N         uint32      `json:"n"`
	StartedAt int64       `json:"s"`
	EndedAt   int64       `json:"e,omitempty"`
	Class     retry.Class `json:"c,omitempty"`
	Ended     bool        `json:"d,omitempty"`
	Error     string      `json:"err,omitempty"`
	Output    []byte      `json:"out,omitempty"`
	Node      string      `json:"node"`
}

// appendAttempt appends a as JSON (the attempt type's encoding/json field
// names, omitting the same empty fields) without reflection: every start
// and every outcome writes one (FuzzAppendAttempt holds it to decoding
// back to a).
func appendAttempt(b []byte, a attempt) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendUint(b, uint64(a.N), 10)
	b = append(b, `,"s":`...)
	b = strconv.AppendInt(b, a.StartedAt, 10)
	if a.EndedAt != 0 {
		b = append(b, `,"e":`...)
		b = strconv.AppendInt(b, a.EndedAt, 10)
	}
	if a.Class != 0 {
		b = append(b, `,"c":`...)
		b = strconv.AppendUint(b, uint64(a.Class), 10)
	}
	if a.Ended {
		b = append(b, `,"d":true`...)
	}
	if a.Error != "" {
		b = append(b, `,"err":`...)
		b = jsonscan.AppendString(b, a.Error)
	}
	if len(a.Output) > 0 {
		b = append(b, `,"out":"`...)
		b = base64.StdEncoding.AppendEncode(b, a.Output)
		b = append(b, '"')
	}
	b = append(b, `,"node":`...)
	b = jsonscan.AppendString(b, a.Node)
	return append(b, '}')
}

// attempt returns a as package state keeps it, without its node.
func (a attempt) attempt() state.Attempt {
	return state.Attempt{N: a.N, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Class: a.Class, Ended: a.Ended, Error: a.Error, Output: a.Output}
}

// stored returns attempt a of the history as stored, run by node.
func stored(a state.Attempt, node string) attempt {
	return attempt{N: a.N, StartedAt: a.StartedAt, EndedAt: a.EndedAt, Class: a.Class, Ended: a.Ended, Error: a.Error, Output: a.Output, Node: node}
}

// jobRow is a job as read from runlog_jobs. Job.Spec points to spec.
type jobRow struct {
	state.Job
	spec state.Spec
	// run is the Job's Run: a row always has one, which its scan fills.
	run state.Run
	// nodes[i] is the node that ran Job.Attempts[i].
	nodes []string
	// node is the node column: the node of the latest attempt.
	node string
}

// newRow returns an empty row, its Spec set.
func newRow() *jobRow {
	r := &jobRow{}
	r.Spec, r.Run = &r.spec, &r.run
	return r
}

// toJob converts r to the engine's view. r must not be used afterwards.
func (r *jobRow) toJob() state.Job {
	j := r.Job
	spec, run := r.spec, r.run
	j.Spec, j.Run = &spec, &run
	return j
}

// nodeOf returns the node that ran attempt n, or "" if n is not in the
// history.
func (r *jobRow) nodeOf(n uint32) string {
	for i := len(r.Attempts()) - 1; i >= 0; i-- {
		if r.Attempts()[i].N == n {
			return r.nodes[i]
		}
	}
	return ""
}

// facts returns what the per-job decisions of package state (AdmitJob,
// SettleJob, OrphanJob) read of r.
func (r *jobRow) facts() state.Facts { return state.FactsOf(&r.Job) }

// step applies op to r and its target's breaker *br (nil: the caller
// feeds the breaker when the change says Fed) by state.Step, the embedded
// store's rule, for the ops a claim, an outcome or a rescue makes; node is
// the node that runs the attempt an OpStart begins.
func (r *jobRow) step(br *retry.Breaker, c retry.Circuit, op *state.Op, node string) state.Change {
	ch := state.Step(&r.Job, br, c, op)
	if ch.Started {
		r.node = node
		r.nodes = append(r.nodes, node)
		// Step dropped the oldest attempt beyond state.MaxAttemptHistory.
		r.nodes = r.nodes[len(r.nodes)-len(r.Attempts()):]
	}
	return ch
}

// jobCols are the columns scanRow reads, in order.
const jobCols = `id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms,
	due, first_due, enqueued_at, finished_at, fails, started, last_error, reason, history, latest, node, metadata, replay_of, queue, priority,
	schedule, tick`

// jobColsNoPayload are jobCols without the payload (read as NULL), for the
// transactions that settle attempts and do not need it.
var jobColsNoPayload = strings.Replace(jobCols, "payload", "NULL::bytea", 1)

// scanRow reads the jobCols of one row.
func scanRow(row pgx.Row) (*jobRow, error) {
	var (
		r           = newRow()
		id, started int64
		st          int16
		hist, meta  []byte
		latest      *string
		replayOf    int64
	)
	p := &r.spec.Policy
	err := row.Scan(&id, &st, &r.spec.Kind, &r.spec.Target, &r.spec.Payload, &r.spec.Key,
		&p.Attempts, &p.BaseMS, &p.CapMS, &p.DeadlineMS, &r.spec.TimeoutMS,
		&r.Due, &r.run.FirstDue, &r.EnqueuedAt, &r.run.FinishedAt, &r.run.Fails, &started, &r.run.LastError, &r.run.Reason, &hist, &latest, &r.node, &meta, &replayOf, &r.spec.Queue, &r.spec.Priority,
		&r.spec.Schedule, &r.spec.Tick)
	if err != nil {
		return nil, err
	}
	if r.spec.Metadata, err = readMetadata(meta); err != nil {
		return nil, fmt.Errorf("pgstore: job %d: %w", id, err)
	}
	r.spec.ReplayOf = uint64(replayOf)
	r.ID, r.State, r.run.Started = uint64(id), state.JobState(st), uint32(started)
	h, err := readHistory(hist, latest)
	if err != nil {
		return nil, fmt.Errorf("pgstore: job %d: %w", id, err)
	}
	if len(h) > 0 {
		r.run.Attempts, r.nodes = make([]state.Attempt, len(h)), make([]string, len(h))
		for i, a := range h {
			r.run.Attempts[i] = a.attempt()
			r.nodes[i] = a.Node
		}
	}
	return r, nil
}

// readHistory joins a row's history and latest columns into its attempts,
// oldest first, at most state.MaxAttemptHistory. They are in attempt
// order already, unless a node older than schema version 3 wrote attempts
// into history after the migration (which the migration asks not to
// allow): then they are sorted, so that the latest attempt is still last.
func readHistory(hist []byte, latest *string) ([]attempt, error) {
	var h []attempt
	if err := json.Unmarshal(hist, &h); err != nil {
		return nil, fmt.Errorf("history column is not runlog's JSON: %w", err)
	}
	if latest == nil {
		return h, nil
	}
	var a attempt
	if err := json.Unmarshal([]byte(*latest), &a); err != nil {
		return nil, fmt.Errorf("latest column is not runlog's JSON: %w", err)
	}
	h = append(h, a)
	if n := len(h); n > 1 && h[n-2].N >= a.N {
		slices.SortStableFunc(h, func(x, y attempt) int { return cmp.Compare(x.N, y.N) })
	}
	return h[max(len(h)-state.MaxAttemptHistory, 0):], nil
}

// splitHistory is the inverse of readHistory: r's history column (every
// attempt but the latest, as JSON) and its latest column ("" for none).
func (r *jobRow) splitHistory() (hist, latest string) {
	h := r.Attempts()
	if len(h) == 0 {
		return "[]", ""
	}
	older := []byte{'['}
	for i, a := range h[:len(h)-1] {
		if i > 0 {
			older = append(older, ',')
		}
		older = appendAttempt(older, stored(a, r.nodes[i]))
	}
	older = append(older, ']')
	return string(older), string(appendAttempt(nil, stored(h[len(h)-1], r.nodes[len(h)-1])))
}

// queryRows runs a query of jobCols and reads every row.
func queryRows(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]*jobRow, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*jobRow
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// writeRows writes the changed rows (state, due, budget, reason, history)
// and breakers and reports whether a job became pending again (a retry), in
// which case it NOTIFYs the nodes: their next due time may have moved.
func (s *Store) writeRows(ctx context.Context, tx querier, rows []*jobRow, changed map[*jobRow]bool, brs map[string]*breakerRow) (requeued bool, err error) {
	var (
		b                            pgx.Batch
		ids, due, finished           []int64
		states                       []int16
		fails                        []int32
		lastErrs, reasons, histories []string
		latests                      []string
	)
	for _, r := range rows {
		if !changed[r] {
			continue
		}
		hist, latest := r.splitHistory()
		requeued = requeued || r.State == state.Pending
		ids, due, finished = append(ids, int64(r.ID)), append(due, r.Due), append(finished, r.FinishedAt())
		states, fails = append(states, int16(r.State)), append(fails, int32(r.Fails()))
		lastErrs, reasons, histories = append(lastErrs, r.LastError()), append(reasons, r.Reason()), append(histories, hist)
		latests = append(latests, latest)
	}
	if len(ids) > 0 {
		b.Queue(`UPDATE runlog_jobs j SET state = u.state, due = u.due, finished_at = u.finished, fails = u.fails,
				last_error = u.last_error, reason = u.reason, history = u.history::jsonb, latest = NULLIF(u.latest, ''),
				lease_until = CASE WHEN u.state = `+runningCode+` THEN j.lease_until END
			FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::bigint[], $5::int[], $6::text[], $7::text[], $8::text[], $9::text[])
				AS u(id, state, due, finished, fails, last_error, reason, history, latest)
			WHERE j.id = u.id`, ids, states, due, finished, fails, lastErrs, reasons, histories, latests)
	}
	if err := queueBreakerWrites(&b, brs); err != nil {
		return false, err
	}
	if requeued {
		b.Queue("SELECT pg_notify($1, '')", chanWake)
	}
	return requeued, sendBatch(ctx, tx, &b)
}
