package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// A queue's rate limit (state/queuepace.go) on PostgreSQL: its limit and
// its pace are columns of the queue's row in runlog_queues (migration
// 0012). A claim locks the rows of the bounded and the limited queues
// (lockPacedSQL), reads their paces under the lock, applies
// state.PaceAfter op by op (claimQueues.applied) and writes the changed
// paces back in its transaction (queuePaceWrites): every node shares one
// bucket per queue, as the embedded store's state holds one.

// paced reports whether one of q is bounded or rate-limited: a queue whose
// row lockPacedSQL locks.
func (q claimQueues) paced() bool {
	for _, qi := range q {
		if qi.Concurrency > 0 || qi.Limit.RateMilli > 0 {
			return true
		}
	}
	return false
}

// lockPacedSQL locks the rows of the bounded and limited queues, in name
// order, and reads their paces (readPaces): a pace read before the lock
// could be one another node's claim has since advanced. It runs as a
// statement of its own (queueLockPaced) or inside the first round trip's
// read (startReadSQL).
const lockPacedSQL = `SELECT name, tat, reserved FROM runlog_queues WHERE concurrency > 0 OR rate_milli > 0
		ORDER BY name COLLATE "C" FOR NO KEY UPDATE`

// queueLockPaced queues, in b, lockPacedSQL, the paces of the limited
// queues read into *into.
func queueLockPaced(b *pgx.Batch, into *claimQueues) {
	b.Queue(lockPacedSQL).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		return readPaces(rows, into)
	})
}

// readPaces reads the rows of lockPacedSQL into the limited queues of
// *into.
func readPaces(rows rowScanner, into *claimQueues) error {
	for rows.Next() {
		var (
			name string
			p    state.Pace
		)
		if err := rows.Scan(&name, &p.Bucket.TAT, &p.Reserved); err != nil {
			return err
		}
		if qi, ok := (*into)[name]; ok && !qi.Limit.IsZero() {
			qi.Pace = p
			(*into)[name] = qi
		}
	}
	return rows.Err()
}

// queueApplied counts op, a start or a defer the claim applied to a job of
// queue name, in the claim's view of the queues, and notes a queue whose
// pace it changed.
func (c *claimTx) queueApplied(name string, op *state.Op) {
	if c.queues.applied(name, op) && !slices.Contains(c.paced, name) {
		c.paced = append(c.paced, name)
	}
}

// queuePaceWrites queues, in b, the write of the paces the claim changed
// (their rows are locked since the claim's first round).
func (c *claimTx) queuePaceWrites(b *pgx.Batch) {
	if len(c.paced) == 0 {
		return
	}
	tats, reserved := make([]int64, len(c.paced)), make([]int64, len(c.paced))
	for i, name := range c.paced {
		p := c.queues[name].Pace
		tats[i], reserved[i] = p.Bucket.TAT, p.Reserved
	}
	b.Queue(`UPDATE runlog_queues q SET tat = u.tat, reserved = u.reserved
		FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(name, tat, reserved) WHERE q.name = u.name`, c.paced, tats, reserved)
}

// setQueueRow writes the setting set of queue name in tx, which holds the
// exclusive queueLock: the row goes with a queue back to the zero setting;
// a queue that loses its rate limit loses its pace too, one whose limit
// changes keeps it (as state.State's setQueue).
func setQueueRow(ctx context.Context, tx pgx.Tx, name string, set state.QueueSetting) error {
	if set.IsZero() {
		_, err := tx.Exec(ctx, "DELETE FROM runlog_queues WHERE name = $1", name)
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO runlog_queues (name, concurrency, paused, rate_milli, burst) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (name) DO UPDATE SET concurrency = EXCLUDED.concurrency, paused = EXCLUDED.paused,
			rate_milli = EXCLUDED.rate_milli, burst = EXCLUDED.burst,
			tat = CASE WHEN EXCLUDED.rate_milli = 0 THEN 0 ELSE runlog_queues.tat END,
			reserved = CASE WHEN EXCLUDED.rate_milli = 0 THEN 0 ELSE runlog_queues.reserved END`,
		name, int32(set.Concurrency), set.Paused, set.Limit.RateMilli, int32(set.Limit.Burst))
	return err
}

// validQueueLimit reports why limit cannot be the rate limit of queue
// name, or nil (a nil limit leaves the queue's as it is).
func validQueueLimit(name string, limit *retry.Limit) error {
	if limit == nil {
		return nil
	}
	if err := limit.Validate(); err != nil {
		return fmt.Errorf("pgstore: rate limit of queue %q: %w", name, err)
	}
	return nil
}
