package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// startReads are where the first round trip of a claim or an outcome
// batch puts what it reads without a lock: the settings of the queues that
// have one, the targets' lifecycles, and the breakers and flows that are
// not the zero ones. A nil field is not read.
type startReads struct {
	queues *claimQueues // read after the shared queueLock
	// lockPaced: with queues, the rows of the bounded and limited queues
	// are locked, and the limited ones' paces read, by the read itself
	// (startReadSQL); without it, the caller does so if it finds such a
	// queue (lockPacedLate).
	lockPaced bool
	lives     *map[string]state.TargetLife
	breakers  *map[string]retry.Breaker
	flows     *map[string]state.Flow
}

// queueStartReads queues, in b, the reads r asks for in one statement
// (startReadSQL): four small statements cost a transaction's first round
// trip more than their work, each a snapshot and an executor's start on a
// server whose two cores the benchmark's claims and outcomes share (W1 at
// 256 slots, side by side: 0.88× of 92d351b with them apart, 0.97×
// without them). With queues, the shared queueLock comes first (a queue
// change commits under the exclusive lock: the settings read after it are
// current while the transaction holds it), and the rows of the bounded and
// limited queues are locked after (by the read itself, or lockPacedLate in a
// round trip of the caller's own): the claims of every
// node that may start a bounded queue's job take turns, each selecting its
// due rows only once the one before has committed. Were the due rows
// selected first, a claim would skip (SKIP LOCKED) the rows of higher
// priority that another claim holds only to leave them pending (their
// queue at its concurrency), and start one of lower priority instead. The
// bounded queues' running attempts are counted only when there are
// bounded queues (countBounded).
func queueStartReads(b *pgx.Batch, r startReads) {
	if r.queues != nil {
		b.Queue(queueLockSharedSQL, queueLock)
	}
	q, l, p := 0, 0, 0
	if r.queues != nil {
		q = 1
		if r.lockPaced {
			p = 1
		}
	}
	if r.lives != nil {
		l = 1
	}
	b.Queue(startReadSQL[q][l][p]).Query(func(rows pgx.Rows) error {
		defer rows.Close()
		if !rows.Next() {
			return errors.Join(rows.Err(), errors.New("pgstore: the read of queues, breakers and flows answered no row"))
		}
		var cols [5][]byte
		if err := rows.Scan(&cols[0], &cols[1], &cols[2], &cols[3], &cols[4]); err != nil {
			return err
		}
		var err error
		if r.queues != nil {
			if *r.queues, err = readQueueSettings(newJSONRows(cols[0])); err != nil {
				return fmt.Errorf("pgstore: read queues: %w", err)
			}
			if err := readPaces(newJSONRows(cols[4]), r.queues); err != nil {
				return fmt.Errorf("pgstore: read queue paces: %w", err)
			}
		}
		if *r.breakers, err = readBreakers(newJSONRows(cols[1])); err != nil {
			return fmt.Errorf("pgstore: read breakers: %w", err)
		}
		if *r.flows, err = readFlows(newJSONRows(cols[2])); err != nil {
			return fmt.Errorf("pgstore: read flows: %w", err)
		}
		if r.lives != nil {
			if *r.lives, err = scanLives(newJSONRows(cols[3])); err != nil {
				return fmt.Errorf("pgstore: read target lifecycles: %w", err)
			}
		}
		return rows.Err()
	})
}

// lockPacedLate locks the rows of the bounded and limited queues among
// queues, and reads the limited ones' paces, in a round trip of its own:
// for a claim whose first round trip did not (startReads.lockPaced false,
// because the node's last claim found no queue with a setting) and found
// such a queue. It reports whether there was one: the due rows the claim
// selected before the lock must then be selected again, after it. Only a
// claim that holds no lock but its due rows' may lock them late: an
// outcome batch holds breaker rows that a claim holding the queues' rows
// may wait for.
func lockPacedLate(ctx context.Context, tx querier, queues *claimQueues) (bool, error) {
	if !queues.paced() {
		return false, nil
	}
	var b pgx.Batch
	queueLockPaced(&b, queues)
	return true, sendBatch(ctx, tx, &b)
}

// startReadSQL[queues][lives][paced] is the statement of queueStartReads:
// one row of five json columns, each the rows of one table (a json array
// of each row's columns, NULL for none), read back by the table's own
// scanner (jsonRows): the queues, breakers, flows and lifecycles, and the
// paces of lockPacedSQL, whose rows it locks; the queues, the lifecycles
// and the paces are NULL unless asked for. The paced rows are locked in
// this statement, not one of their own (a statement less in each outcome
// batch), after the shared queueLock of the statement before: their
// settings cannot change while it is held, and a pace another claim
// advanced meanwhile is read as the lock leaves it (the row's latest
// version).
var startReadSQL = func() (sql [2][2][2]string) {
	agg := func(cols, from string) string {
		return "(SELECT json_agg(json_build_array(" + cols + ")) FROM " + from + ")"
	}
	for q := range 2 {
		for l := range 2 {
			for p := range 2 {
				queues, lives, paces := "NULL::json", "NULL::json", "NULL::json"
				if q == 1 {
					queues = agg(queueSettingCols, "runlog_queues WHERE "+queueHasSettingSQL)
					if p == 1 {
						paces = agg("name, tat, reserved", "("+lockPacedSQL+") p")
					}
				}
				if l == 1 {
					lives = agg(lifeCols, "runlog_target_life")
				}
				sql[q][l][p] = "SELECT " + queues + ", " + agg(breakerCols, "runlog_breakers WHERE "+nonZeroBreakerWhere) + ", " +
					agg(flowCols, "runlog_flows WHERE "+nonZeroFlowWhere) + ", " + lives + ", " + paces
			}
		}
	}
	return sql
}()

// rowScanner is what the scanners of rows read: pgx.Rows, or jsonRows.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// jsonRows reads a json array of rows, each an array of its columns (a
// json_agg of json_build_array), as pgx.Rows reads the rows of a query: one
// statement reads several tables, each through its own scanner.
type jsonRows struct {
	rows [][]json.RawMessage
	cur  []json.RawMessage
	err  error
}

// newJSONRows returns the rows of data (nil, SQL NULL: none).
func newJSONRows(data []byte) *jsonRows {
	r := &jsonRows{}
	if data != nil {
		r.err = json.Unmarshal(data, &r.rows)
	}
	return r
}

// Next moves to the next row.
func (r *jsonRows) Next() bool {
	if r.err != nil || len(r.rows) == 0 {
		return false
	}
	r.cur, r.rows = r.rows[0], r.rows[1:]
	return true
}

// Scan reads the current row's columns into dest, in order.
func (r *jsonRows) Scan(dest ...any) error {
	if len(dest) != len(r.cur) {
		return fmt.Errorf("a row of %d columns scanned into %d values", len(r.cur), len(dest))
	}
	for i, d := range dest {
		if err := json.Unmarshal(r.cur[i], d); err != nil {
			return fmt.Errorf("column %d: %w", i+1, err)
		}
	}
	return nil
}

// Err is the error that ended the rows, if any.
func (r *jsonRows) Err() error { return r.err }

// Close does nothing: the rows are in memory.
func (r *jsonRows) Close() {}
