package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/state"
)

// fillFinished inserts n finished jobs straight in SQL (generate_series):
// ids 1..n, finish times spread evenly over span ms before end, 90 %
// succeeded, 8 % failed, 2 % cancelled, kinds email, webhook and audit in
// turn; then it analyzes the table, as autovacuum would.
func fillFinished(t *testing.T, s *Store, n int, end, span int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `INSERT INTO runlog_jobs (id, state, kind, target, payload, attempts, base_ms, cap_ms, deadline_ms, timeout_ms,
			due, first_due, enqueued_at, finished_at, started, latest, node)
		SELECT g, CASE WHEN g % 50 = 0 THEN 4 WHEN g % 50 < 5 THEN 3 ELSE 2 END, (ARRAY['email','webhook','audit'])[1 + g % 3],
			'target-' || (g % 20), '\x7b7d'::bytea, 10, 500, 30000, 0, 60000, f - 5, f - 5, f - 10, f, 1,
			'{"n":1,"s":' || (f - 5) || ',"e":' || f || ',"d":true,"node":"n1"}', 'n1'
		FROM (SELECT g, $2::bigint - $3::bigint + g * $3::bigint / $1::bigint AS f FROM generate_series(1, $1::bigint) AS g) s`,
		n, end, span); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "SELECT setval('runlog_job_id', $1)", n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE runlog_jobs"); err != nil {
		t.Fatal(err)
	}
}

// TestExpireUsesIndex: on a table of 300 000 finished jobs, big enough for
// the planner to weigh a scan against an index, the retention DELETE's
// plan (custom and generic) reads no part of runlog_jobs by a sequential
// scan; and Expire, working off a backlog larger than one batch, deletes
// exactly the jobs whose own rule (state and kind) ran out.
func TestExpireUsesIndex(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("inserts 300 000 rows")
	}
	ctx := context.Background()
	day := (24 * time.Hour).Milliseconds()
	ret := &state.Retention{SucceededMS: 7 * day, CancelledMS: 7 * day, FailedMS: 30 * day,
		PerKind: []state.KindRetention{{Kind: "audit", SucceededMS: 0, CancelledMS: 0, FailedMS: 0}, {Kind: "webhook", SucceededMS: 6 * day, CancelledMS: 6 * day, FailedMS: 6 * day}}}
	s, _ := openTest(t, Options{Retention: ret})
	const n = 300000
	now := int64(1_000_000_000_000)
	fillFinished(t, s, n, now, 7*day+day/2) // past the email rule's bucket end (7 days + 7/16 of one) the oldest expire, and webhook's first 1.1 days
	sql, args, ok := expireSQL(ret, now, expireBatch)
	if !ok {
		t.Fatal("expireSQL: no rule expires anything")
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "EXPLAIN "+sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		conn.Exec(ctx, "RESET plan_cache_mode")
		conn.Release()
		p := strings.Join(plan, "\n")
		if strings.Contains(p, "Seq Scan on runlog_jobs") || !strings.Contains(p, "runlog_jobs_expiry") {
			t.Fatalf("%s: the retention DELETE scans the table, or not by runlog_jobs_expiry:\n%s", mode, p)
		}
	}

	// What should go, by each job's own rule: audit never; webhook after
	// 6 days; others: succeeded and cancelled after 7, failed after 30.
	var want, total int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = 'webhook' AND ((finished_at + 6 * $2::bigint) / (6 * $2::bigint / 16) + 1) * (6 * $2::bigint / 16) <= $1
			OR kind = 'email' AND state IN (2, 4) AND ((finished_at + 7 * $2::bigint) / (7 * $2::bigint / 16) + 1) * (7 * $2::bigint / 16) <= $1), count(*) FROM runlog_jobs`, now, day).Scan(&want, &total); err != nil {
		t.Fatal(err)
	}
	if want <= expireBatch {
		t.Fatalf("the fixture expires %d jobs, not more than one batch (%d)", want, expireBatch)
	}
	if err := s.Expire(ctx, now); err != nil {
		t.Fatal(err)
	}
	var left, wrong int
	if err := s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE kind = 'webhook' AND ((finished_at + 6 * $2::bigint) / (6 * $2::bigint / 16) + 1) * (6 * $2::bigint / 16) <= $1
			OR kind = 'email' AND state IN (2, 4) AND ((finished_at + 7 * $2::bigint) / (7 * $2::bigint / 16) + 1) * (7 * $2::bigint / 16) <= $1) FROM runlog_jobs`, now, day).Scan(&left, &wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 || left != total-want {
		t.Fatalf("after Expire: %d jobs left (want %d), %d of them expired", left, total-want, wrong)
	}
}
