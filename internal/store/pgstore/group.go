package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runlog/runlog/internal/store"
)

// Concurrent enqueues of one job each (no key) are inserted together: while
// maxInsertGroups inserts are in flight, the jobs that arrive wait, and the
// next insert takes all of them (up to maxInsertGroup) in one statement, as
// group commit shares a WAL flush. A single-row INSERT pays for its
// statement (a parse-bind-execute round trip, the table's ten indexes
// opened and locked, their predicates compiled, a commit) as much as for
// its row; with 64 producers each enqueuing one job at a time (W2), that
// was most of what an enqueue cost. Under light load an insert takes one
// job, as before: nothing waits on a timer.
const (
	maxInsertGroups = 4
	maxInsertGroup  = 256
)

// insertGroupTimeout bounds one grouped insert: it runs for several
// callers, so on no caller's context.
const insertGroupTimeout = time.Minute

// insertGroups gathers the concurrent single-job enqueues of a store.
type insertGroups struct {
	mu      sync.Mutex
	running int           // inserts in flight, at most maxInsertGroups
	waiting []*groupedJob // jobs no insert has taken yet, in arrival order
	inserts int           // inserts run so far (for tests)
}

// groupedJob is one job waiting for, or inside, a grouped insert.
type groupedJob struct {
	now  int64
	job  *store.NewJob
	lead chan struct{} // closed when this job's caller is to run the next insert
	done chan struct{} // closed when id or err is set
	id   int64
	err  error
}

// enqueueGrouped inserts j, a job without a key, with the single-job
// enqueues that arrive meanwhile (see insertGroups), and returns its id.
func (s *Store) enqueueGrouped(ctx context.Context, now int64, j *store.NewJob) (int64, error) {
	g := &s.groups
	p := &groupedJob{now: now, job: j, lead: make(chan struct{}), done: make(chan struct{})}
	g.mu.Lock()
	if g.running < maxInsertGroups {
		g.running++
		g.mu.Unlock()
		s.leadInserts(p)
		return p.id, p.err
	}
	g.waiting = append(g.waiting, p)
	g.mu.Unlock()
	select {
	case <-p.done:
		return p.id, p.err
	case <-p.lead:
		s.leadInserts(p)
		return p.id, p.err
	case <-ctx.Done():
	}
	// Cancelled: a job still waiting is taken out (nothing was added);
	// one an insert has taken, or whose caller was just made to lead,
	// goes through with it.
	g.mu.Lock()
	for i, w := range g.waiting {
		if w == p {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			g.mu.Unlock()
			return 0, ctx.Err()
		}
	}
	g.mu.Unlock()
	select {
	case <-p.done:
	case <-p.lead:
		s.leadInserts(p)
	}
	return p.id, p.err
}

// leadInserts runs one insert of first and the jobs waiting, then hands the
// lead to the job waiting longest, if any (or frees its place).
func (s *Store) leadInserts(first *groupedJob) {
	g := &s.groups
	g.mu.Lock()
	n := min(len(g.waiting), maxInsertGroup-1)
	batch := make([]*groupedJob, 0, n+1)
	batch = append(append(batch, first), g.waiting[:n]...)
	g.waiting = append(g.waiting[:0], g.waiting[n:]...)
	g.inserts++
	g.mu.Unlock()

	s.insertGroup(batch)
	for _, p := range batch {
		close(p.done)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.running--
		return
	}
	next := g.waiting[0]
	g.waiting = g.waiting[1:]
	close(next.lead)
}

// insertGroup inserts the jobs of batch and sets each one's id or error.
// A batch of one is enqueueOne's statement. A larger one is one statement
// too (insertGroupSQL); if the server refuses it (an error of the
// statement, which then added nothing), each job is inserted alone, so
// that one job the server refuses fails alone.
func (s *Store) insertGroup(batch []*groupedJob) {
	ctx, cancel := context.WithTimeout(s.ctx, insertGroupTimeout)
	defer cancel()
	if len(batch) == 1 {
		batch[0].id, batch[0].err = s.insertOne(ctx, batch[0].now, batch[0].job)
		return
	}
	ids, err := s.insertMany(ctx, batch)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		for i, p := range batch {
			p.id = ids[i]
		}
	case errors.As(err, &pe):
		for _, p := range batch {
			p.id, p.err = s.insertOne(ctx, p.now, p.job)
		}
	default:
		// The connection failed: whether the statement committed is not
		// known, so no job is inserted again here (a duplicate); each
		// caller learns of the failure, as it would have alone.
		for _, p := range batch {
			p.err = err
		}
	}
}

// insertGroupSQL inserts the jobs of one grouped insert ($1 how many, the
// columns as arrays in order) and answers their ids in that order: ids
// drawn first, one per ordinal, so that the answer does not rest on the
// order of RETURNING. Each job's enqueue time is its own ($11).
const insertGroupSQL = `WITH ids AS MATERIALIZED (SELECT g AS n, nextval('runlog_job_id') AS id FROM generate_series(1, $1::int) g),
	ins AS (INSERT INTO runlog_jobs
		(id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, metadata, replay_of, queue, priority)
		SELECT ids.id, ` + pendingCode + `, u.kind, u.target, u.payload, '', u.att, u.base, u.cap, u.dl, u.tmo, u.due, u.due, u.at, u.meta, u.replay, u.queue, u.prio
		FROM unnest($2::text[], $3::text[], $4::bytea[], $5::int[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[],
			$11::bigint[], $12::jsonb[], $13::bigint[], $14::text[], $15::int[])
			WITH ORDINALITY AS u(kind, target, payload, att, base, cap, dl, tmo, due, at, meta, replay, queue, prio, n)
		JOIN ids ON ids.n = u.n)
	SELECT id FROM ids ORDER BY n`

// insertMany inserts the jobs of batch in one statement (insertGroupSQL)
// and returns their ids in batch order.
func (s *Store) insertMany(ctx context.Context, batch []*groupedJob) ([]int64, error) {
	n := len(batch)
	var (
		kinds, targets, queues = make([]string, n), make([]string, n), make([]string, n)
		payloads, metas        = make([][]byte, n), make([][]byte, n)
		atts, prios            = make([]int32, n), make([]int32, n)
		base, capMS, dl, tmo   = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		due, at, replays       = make([]int64, n), make([]int64, n), make([]int64, n)
	)
	for i, p := range batch {
		sp := &p.job.Spec
		kinds[i], targets[i], queues[i], payloads[i], metas[i] = sp.Kind, sp.Target, sp.Queue, sp.Payload, metadataJSON(sp.Metadata)
		atts[i], prios[i] = int32(sp.Policy.Attempts), sp.Priority
		base[i], capMS[i], dl[i], tmo[i] = sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS, sp.TimeoutMS
		due[i], at[i], replays[i] = p.job.Due, p.now, int64(sp.ReplayOf)
	}
	rows, err := s.pool.Query(ctx, insertGroupSQL, n, kinds, targets, payloads, atts, base, capMS, dl, tmo, due, at, metas, replays, queues, prios)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	if len(ids) != n {
		return nil, fmt.Errorf("pgstore: a grouped insert of %d jobs answered %d ids", n, len(ids))
	}
	return ids, nil
}
