// Command pgceiling measures how fast PostgreSQL alone can take jobs through
// the two durable writes that any job runner keeping a row per job must
// make: the claim (pending to running, committed before the handler runs)
// and the outcome (running to succeeded, committed before it is reported).
// There is no runner, no handler, no lease, no history: one table with the
// fewest columns and one partial index for the due order, N pending rows,
// and W connections that each loop: claim B rows in one transaction, mark
// them succeeded in the next. Its jobs/s is a ceiling for W1's processing
// rate on this machine and this server, whatever the runner does; the
// issue-21 note compares it with River's and runlog's rates.
//
//	go run ./cmd/pgceiling -pg "$URL" -n 5000 -batch 16 -workers 2
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	url := flag.String("pg", os.Getenv("RUNLOG_TEST_POSTGRES_URL"), "PostgreSQL URL")
	n := flag.Int("n", 5000, "pending jobs")
	batch := flag.Int("batch", 16, "rows per claim and per outcome transaction")
	workers := flag.Int("workers", 2, "connections claiming and finishing at once")
	flag.Parse()
	if err := run(*url, *n, *batch, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "pgceiling:", err)
		os.Exit(1)
	}
}

func run(url string, n, batch, workers int) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	setup := []string{
		`DROP TABLE IF EXISTS pgceiling_jobs`,
		`CREATE TABLE pgceiling_jobs (id bigint PRIMARY KEY, state smallint NOT NULL, due bigint NOT NULL, payload bytea)`,
		`CREATE INDEX pgceiling_due ON pgceiling_jobs (due, id) WHERE state = 0`,
		fmt.Sprintf(`INSERT INTO pgceiling_jobs SELECT i, 0, i, repeat('x', 50)::bytea FROM generate_series(1, %d) i`, n),
		`VACUUM ANALYZE pgceiling_jobs`,
	}
	for _, q := range setup {
		if _, err := pool.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	const claim = `UPDATE pgceiling_jobs SET state = 1 WHERE id IN (
		SELECT id FROM pgceiling_jobs WHERE state = 0 ORDER BY due, id LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING id`
	const finish = `UPDATE pgceiling_jobs SET state = 2 WHERE id = ANY($1)`
	var done sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		done.Add(1)
		go func() {
			defer done.Done()
			for {
				rows, err := pool.Query(ctx, claim, batch)
				if err != nil {
					errs <- err
					return
				}
				var ids []int64
				for rows.Next() {
					var id int64
					if err := rows.Scan(&id); err != nil {
						errs <- err
						return
					}
					ids = append(ids, id)
				}
				if err := rows.Err(); err != nil {
					errs <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				if _, err := pool.Exec(ctx, finish, ids); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	done.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		return err
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pgceiling_jobs WHERE state <> 2`).Scan(&left); err != nil {
		return err
	}
	if left != 0 {
		return fmt.Errorf("%d rows not finished", left)
	}
	fmt.Printf(`{"n":%d,"batch":%d,"workers":%d,"seconds":%.3f,"jobs_per_s":%.0f}`+"\n", n, batch, workers, elapsed.Seconds(), float64(n)/elapsed.Seconds())
	_, err = pool.Exec(ctx, `DROP TABLE pgceiling_jobs`)
	return err
}
