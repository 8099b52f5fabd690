package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/store"
)

// Enqueue implements store.Store: the jobs are inserted, and the nodes
// notified, in one transaction.
func (s *Store) Enqueue(ctx context.Context, now int64, jobs []store.NewJob) ([]store.Enqueued, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if len(jobs) == 1 && jobs[0].Spec.Key == "" {
		id, err := s.enqueueGrouped(ctx, now, &jobs[0])
		if err != nil {
			return nil, fmt.Errorf("pgstore: enqueue (nothing was added): %w", err)
		}
		s.dueAddedTo(jobs[0].Spec.Target, jobs[0].Due)
		s.wakeNodes()
		return []store.Enqueued{{ID: uint64(id)}}, nil
	}
	var out []store.Enqueued
	err := s.inTx(ctx, false, func(tx pgx.Tx) error {
		var err error
		out, err = enqueueTx(ctx, tx, now, jobs, false)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: enqueue (nothing was added): %w", err)
	}
	for i, e := range out {
		if !e.Existing {
			s.dueAddedTo(jobs[i].Spec.Target, jobs[i].Due)
		}
	}
	s.wakeNodes()
	return out, nil
}

// insertOne inserts one job without a key in one statement (its own
// transaction): one round trip, where a transaction would take four (BEGIN,
// draw the id, insert, COMMIT). The columns are EnqueueTx's.
func (s *Store) insertOne(ctx context.Context, now int64, j *store.NewJob) (int64, error) {
	sp := &j.Spec
	var id int64
	err := s.pool.QueryRow(ctx, `WITH ins AS (INSERT INTO runlog_jobs
			(id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, metadata, replay_of, queue, priority)
			VALUES (nextval('runlog_job_id'), `+pendingCode+`, $1, $2, $3, '', $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, $14)
			RETURNING id)
		SELECT id FROM ins`,
		sp.Kind, sp.Target, sp.Payload, int32(sp.Policy.Attempts), sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS,
		sp.TimeoutMS, j.Due, now, metadataJSON(sp.Metadata), int64(sp.ReplayOf), sp.Queue, sp.Priority).Scan(&id)
	return id, err
}

// EnqueueTx inserts jobs in the caller's transaction tx and NOTIFYs the
// nodes in it, so the jobs exist, and the nodes wake, if and only if tx
// commits. Ids are answered in order; a job whose idempotency key is held
// (by a kept job, or by an earlier job of the batch) answers the holder's id
// with Existing set and adds nothing. The jobs must be valid (the engine's
// rules: a kind, a valid policy); now stamps their enqueue time.
func EnqueueTx(ctx context.Context, tx pgx.Tx, now int64, jobs []store.NewJob) ([]store.Enqueued, error) {
	return enqueueTx(ctx, tx, now, jobs, true)
}

// enqueueTx is EnqueueTx; without notify it leaves the NOTIFY to the
// caller. A transaction that NOTIFYs holds a lock that serializes the
// commits of every notifying transaction of the database until it has
// committed, its WAL flush included, so the store's own enqueues commit
// without it and wake the nodes afterwards (Store.wakeNodes), letting
// concurrent enqueues share their WAL flushes.
func enqueueTx(ctx context.Context, tx pgx.Tx, now int64, jobs []store.NewJob, notify bool) ([]store.Enqueued, error) {
	out := make([]store.Enqueued, len(jobs))
	var keys []string
	for _, j := range jobs {
		if j.Spec.Key != "" {
			keys = append(keys, j.Spec.Key)
		}
	}
	held := make(map[string]uint64)
	if len(keys) > 0 {
		if err := keyHolders(ctx, tx, keys, held); err != nil {
			return nil, err
		}
	}
	var (
		fresh     []int          // indexes of the jobs to insert
		firstWith map[string]int // key → index of the batch's first job with it
		dupOf     = make(map[int]int)
	)
	for i, j := range jobs {
		if k := j.Spec.Key; k != "" {
			if id, ok := held[k]; ok {
				out[i] = store.Enqueued{ID: id, Existing: true}
				continue
			}
			if first, ok := firstWith[k]; ok {
				dupOf[i] = first
				continue
			}
			if firstWith == nil {
				firstWith = make(map[string]int)
			}
			firstWith[k] = i
		}
		fresh = append(fresh, i)
	}
	if len(fresh) == 0 {
		return out, nil
	}
	ids, err := nextIDs(ctx, tx, len(fresh))
	if err != nil {
		return nil, err
	}
	var (
		cols               = make([]int64, len(fresh))
		kinds, targets, ks = make([]string, len(fresh)), make([]string, len(fresh)), make([]string, len(fresh))
		payloads           = make([][]byte, len(fresh))
		atts               = make([]int32, len(fresh))
		base, capMS, dl    = make([]int64, len(fresh)), make([]int64, len(fresh)), make([]int64, len(fresh))
		tmo, due           = make([]int64, len(fresh)), make([]int64, len(fresh))
		metas              [][]byte // nil unless a job has metadata
		replays            []int64  // nil unless a job is a replay
		queues, prios      = make([]string, len(fresh)), make([]int32, len(fresh))
	)
	for n, i := range fresh {
		sp := &jobs[i].Spec
		cols[n], kinds[n], targets[n], ks[n], payloads[n] = ids[n], sp.Kind, sp.Target, sp.Key, sp.Payload
		atts[n], base[n], capMS[n], dl[n] = int32(sp.Policy.Attempts), sp.Policy.BaseMS, sp.Policy.CapMS, sp.Policy.DeadlineMS
		tmo[n], due[n] = sp.TimeoutMS, jobs[i].Due
		if len(sp.Metadata) > 0 {
			if metas == nil {
				metas = make([][]byte, len(fresh))
			}
			metas[n] = metadataJSON(sp.Metadata)
		}
		if sp.ReplayOf != 0 {
			if replays == nil {
				replays = make([]int64, len(fresh))
			}
			replays[n] = int64(sp.ReplayOf)
		}
		queues[n], prios[n] = sp.Queue, sp.Priority
		out[i] = store.Enqueued{ID: uint64(ids[n])}
	}
	rows, err := tx.Query(ctx, `INSERT INTO runlog_jobs
		(id, state, kind, target, payload, key, attempts, base_ms, cap_ms, deadline_ms, timeout_ms, due, first_due, enqueued_at, queue, priority,
			metadata, replay_of)
		SELECT u.id, `+pendingCode+`, kind, target, payload, key, att, base, cap, dl, tmo, due, due, $12, queue, prio,
			($15::jsonb[])[u.n], coalesce(($16::bigint[])[u.n], 0)
		FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::int[],
			$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[], $13::text[], $14::int[])
			WITH ORDINALITY AS u(id, kind, target, payload, key, att, base, cap, dl, tmo, due, queue, prio, n)
		ON CONFLICT (key) WHERE key <> '' DO NOTHING
		RETURNING id`, cols, kinds, targets, payloads, ks, atts, base, capMS, dl, tmo, due, now, queues, prios, metas, replays)
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert jobs: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgstore: insert jobs: %w", err)
	}
	if len(inserted) < len(fresh) {
		// A concurrent transaction committed a job with one of the keys
		// meanwhile: answer its id.
		got := make(map[int64]bool, len(inserted))
		for _, id := range inserted {
			got[id] = true
		}
		for n, i := range fresh {
			if got[ids[n]] {
				continue
			}
			var id int64
			if err := tx.QueryRow(ctx, "SELECT id FROM runlog_jobs WHERE key = $1", ks[n]).Scan(&id); err != nil {
				return nil, fmt.Errorf("pgstore: key %q was taken by a concurrent enqueue that this transaction cannot see yet; enqueue again: %w", ks[n], err)
			}
			out[i] = store.Enqueued{ID: uint64(id), Existing: true}
		}
	}
	for i, first := range dupOf {
		out[i] = store.Enqueued{ID: out[first].ID, Existing: true}
	}
	if !notify {
		return out, nil
	}
	if _, err := tx.Exec(ctx, "SELECT pg_notify($1, '')", chanWake); err != nil {
		return nil, fmt.Errorf("pgstore: notify: %w", err)
	}
	return out, nil
}

// keyHolders adds the holder of each held key among keys to held.
func keyHolders(ctx context.Context, tx pgx.Tx, keys []string, held map[string]uint64) error {
	rows, err := tx.Query(ctx, "SELECT key, id FROM runlog_jobs WHERE key = ANY($1)", keys)
	if err != nil {
		return fmt.Errorf("pgstore: look up keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var id int64
		if err := rows.Scan(&k, &id); err != nil {
			return err
		}
		held[k] = uint64(id)
	}
	return rows.Err()
}

// nextIDs draws n job ids, ascending.
func nextIDs(ctx context.Context, tx pgx.Tx, n int) ([]int64, error) {
	rows, err := tx.Query(ctx, "SELECT nextval('runlog_job_id') FROM generate_series(1, $1)", n)
	if err != nil {
		return nil, fmt.Errorf("pgstore: draw job ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("pgstore: draw job ids: %w", err)
	}
	slices.Sort(ids)
	return ids, nil
}
