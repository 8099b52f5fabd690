package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/internal/state"
	"github.com/runlog/runlog/retry"
)

// breakerRow is a target's breaker as a transaction read it: locked (FOR
// UPDATE) when the transaction may change it, else a plain read of the zero
// breaker, which the transaction's decisions leave unchanged.
type breakerRow struct {
	b, orig retry.Breaker
	locked  bool
	// flow is the target's flow as the transaction holds it, when it
	// locked its row (flowLocked); flowOrig as it read it (flows.go).
	flow, flowOrig state.Flow
	flowLocked     bool
}

// loadBreakers reads the breakers of the targets not yet in into and adds
// them. A breaker that is not the zero one, or whose target is in mayFail
// (an outcome of the transaction counts as its failure), is locked FOR
// UPDATE, in target order, since the transaction may change it. A zero
// breaker that nothing here fails stays unlocked: admission and a success
// leave it as it is, so the transaction orders before any concurrent one
// that changes it, and the hot path (every target healthy) takes no lock
// that all nodes would queue on.
//
// mayFail nil says that the transaction only admits (a claim): then a
// closed breaker stays unlocked too, failures or not, since admission
// leaves any closed breaker as it is (retry.Breaker.Admit). A failing
// target whose breaker has not opened is then claimed as a healthy one
// is, without queueing behind the outcome batches that write its breaker
// (each holds the row's lock from its first round trip to its commit) and
// without a round trip of its own to lock it.
//
// nonZero, if not nil, holds every breaker that was not the zero one when
// tx read them all (queueStartReads): the targets not in it are read
// as zero breakers without a query.
func (s *Store) loadBreakers(ctx context.Context, tx querier, targets []string, mayFail map[string]bool, into map[string]*breakerRow, nonZero map[string]retry.Breaker) error {
	var need []string
	for _, t := range targets {
		if _, ok := into[t]; !ok {
			need = append(need, t)
		}
	}
	if len(need) == 0 {
		return nil
	}
	slices.Sort(need)
	need = slices.Compact(need)
	read := nonZero
	if read == nil {
		var err error
		read, err = scanBreakers(ctx, tx, breakersOfSQL, need)
		if err != nil {
			return err
		}
	}
	var lock, missing []string
	for _, t := range need {
		b, exists := read[t]
		if !mayFail[t] && (b.IsZero() || mayFail == nil && b.State == retry.Closed) {
			into[t] = &breakerRow{b: b, orig: b}
			continue
		}
		lock = append(lock, t)
		if !exists {
			missing = append(missing, t)
		}
	}
	if len(lock) == 0 {
		return nil
	}
	if len(missing) > 0 {
		// Committed at once, outside tx, so that the rows exist to be
		// locked and no transaction waits on another's uncommitted insert.
		if _, err := s.pool.Exec(ctx, "INSERT INTO runlog_breakers (target) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING", missing); err != nil {
			return fmt.Errorf("pgstore: create breaker rows: %w", err)
		}
	}
	locked, err := scanBreakers(ctx, tx, lockBreakersSQL, lock)
	if err != nil {
		return err
	}
	for _, t := range lock {
		b, ok := locked[t]
		if !ok {
			return fmt.Errorf("pgstore: the breaker row of target %q vanished while it was being locked; was runlog_breakers changed by hand?", t)
		}
		into[t] = &breakerRow{b: b, orig: b, locked: true}
	}
	return nil
}

// breakersOfSQL reads the breakers of targets $1, unlocked.
const breakersOfSQL = "SELECT " + breakerCols + " FROM runlog_breakers WHERE target = ANY($1)"

// lockBreakersSQL locks and reads the breakers of targets $1, in the
// order every transaction locks them.
const lockBreakersSQL = "SELECT " + breakerCols + ` FROM runlog_breakers
	WHERE target = ANY($1) ORDER BY target COLLATE "C" FOR UPDATE`

// queueLockBreakers queues, in b, the lock of the breakers of targets
// (sorted), adding those that exist to into as locked. A target without a
// row yet is left out: loadBreakers creates and locks it.
func queueLockBreakers(b *pgx.Batch, targets []string, into map[string]*breakerRow) {
	if len(targets) == 0 {
		return
	}
	b.Queue(lockBreakersSQL, targets).Query(func(rows pgx.Rows) error {
		m, err := readBreakers(rows)
		for t, br := range m {
			into[t] = &breakerRow{b: br, orig: br, locked: true}
		}
		return err
	})
}

// scanBreakers runs a query of breaker rows for the targets.
func scanBreakers(ctx context.Context, tx querier, sql string, targets []string) (map[string]retry.Breaker, error) {
	rows, err := tx.Query(ctx, sql, targets)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read breakers: %w", err)
	}
	return readBreakers(rows)
}

// breakerCols are the columns of a breaker, in the order readBreakers
// scans them.
const breakerCols = "target, state, fails, until, busy"

// nonZeroBreakerWhere selects the breakers that are not the zero one (as
// a rule none, or few: only targets in trouble have one).
const nonZeroBreakerWhere = "NOT (state = " + closedCode + " AND cardinality(fails) = 0 AND until = 0 AND busy = 0)"

// nonZeroBreakersSQL reads every breaker that is not the zero one.
const nonZeroBreakersSQL = "SELECT " + breakerCols + " FROM runlog_breakers WHERE " + nonZeroBreakerWhere

// readBreakers reads breaker rows (target, state, fails, until, busy) and
// closes rows.
func readBreakers(rows rowScanner) (map[string]retry.Breaker, error) {
	defer rows.Close()
	out := make(map[string]retry.Breaker)
	for rows.Next() {
		var (
			t     string
			st    int16
			fails []int64
			until int64
			busy  int32
		)
		if err := rows.Scan(&t, &st, &fails, &until, &busy); err != nil {
			return nil, err
		}
		if len(fails) == 0 {
			fails = nil
		}
		out[t] = retry.Breaker{State: retry.BreakerState(st), Fails: fails, Until: until, Busy: int(busy)}
	}
	return out, rows.Err()
}

// queueBreakerWrites queues the writes of the breakers that changed. Only a
// locked breaker may change.
func queueBreakerWrites(b *pgx.Batch, brs map[string]*breakerRow) error {
	for t, br := range brs {
		queueFlowWrite(b, t, br)
		if sameBreaker(br.b, br.orig) {
			continue
		}
		if !br.locked {
			return fmt.Errorf("pgstore: internal error: the unlocked breaker of target %q changed; nothing was written", t)
		}
		fails := br.b.Fails
		if fails == nil {
			fails = []int64{}
		}
		b.Queue("UPDATE runlog_breakers SET state = $2, fails = $3, until = $4, busy = $5 WHERE target = $1",
			t, int16(br.b.State), fails, br.b.Until, int32(br.b.Busy))
		br.orig = br.b // written: a later write in the same transaction starts from here
	}
	return nil
}

// sameBreaker reports whether a and b are equal.
func sameBreaker(a, b retry.Breaker) bool {
	return a.State == b.State && a.Until == b.Until && a.Busy == b.Busy && slices.Equal(a.Fails, b.Fails)
}
