package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLock is the key of the session advisory lock that Migrate holds
// while it applies migrations, so that nodes starting together apply each
// migration once ("runlog" in ASCII).
const migrationLock int64 = 0x72756e6c6f67

// ErrSchemaNewer is returned when the database carries a schema version that
// this build does not know: a newer runlog migrated it.
var ErrSchemaNewer = errors.New("pgstore: the database schema is newer than this build of runlog")

// ErrSchemaOld is returned by Open without Options.Migrate when the database
// lacks migrations this build needs.
var ErrSchemaOld = errors.New("pgstore: the database schema is older than this build of runlog")

// migration is one versioned SQL file, migrations/NNNN_name.sql.
type migration struct {
	version int
	name    string
	sql     string
	// noTx: the file starts with the line noTxMarker; its statements run
	// one by one outside a transaction (CREATE INDEX CONCURRENTLY), each
	// safe to run again (IF EXISTS, IF NOT EXISTS).
	noTx bool
}

// noTxMarker, as a migration's first line, runs it outside a transaction.
const noTxMarker = "-- runlog: no transaction"

// statements splits a migration's SQL into statements at the lines that
// end with a semicolon (none of runlog's statements has one inside), and
// drops the comments and blank lines.
func statements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line + "\n")
		if strings.HasSuffix(t, ";") {
			out = append(out, cur.String())
			cur.Reset()
		}
	}
	if strings.TrimSpace(cur.String()) != "" {
		out = append(out, cur.String())
	}
	return out
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, n := range names {
		base := strings.TrimPrefix(n, "migrations/")
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("pgstore: migration file %s is not named NNNN_name.sql", n)
		}
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: base, sql: string(b), noTx: strings.HasPrefix(string(b), noTxMarker+"\n")})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := range out {
		if out[i].version != i+1 {
			return nil, fmt.Errorf("pgstore: migration versions must be 1, 2, 3, ... without gaps; found %s at position %d", out[i].name, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the schema version this build needs: its newest migration.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// Migrate applies the migrations that the database at url lacks, in version
// order, each in its own transaction together with its row in
// runlog_schema_migrations, under a session advisory lock so that concurrent
// callers apply each migration once. It returns the schema version reached.
// It fails with ErrSchemaNewer when the database is ahead of this build.
func Migrate(ctx context.Context, url string) (int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("pgstore: connect to apply migrations: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrateConn(ctx, conn)
}

// migrateConn is Migrate on an open connection.
func migrateConn(ctx context.Context, conn *pgx.Conn) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	if err := lockMigrations(ctx, conn); err != nil {
		return 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLock)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS runlog_schema_migrations (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return 0, fmt.Errorf("pgstore: create runlog_schema_migrations: %w", err)
	}
	have, err := currentVersion(ctx, conn)
	if err != nil {
		return 0, err
	}
	if have > len(ms) {
		return have, fmt.Errorf("%w: database at version %d, this build knows %d; upgrade runlog", ErrSchemaNewer, have, len(ms))
	}
	for _, m := range ms[have:] {
		if m.noTx {
			if err := applyNoTx(ctx, conn, m); err != nil {
				return have, err
			}
			have = m.version
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO runlog_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return have, fmt.Errorf("pgstore: apply migration %s (nothing of it was kept): %w", m.name, err)
		}
		have = m.version
	}
	return have, nil
}

// lockMigrations takes the migration lock, polling for it rather than
// waiting in pg_advisory_lock: a session waiting in a statement holds a
// snapshot, which CREATE INDEX CONCURRENTLY in the session that has the
// lock would wait for in turn (a deadlock).
func lockMigrations(ctx context.Context, conn *pgx.Conn) error {
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLock).Scan(&got); err != nil {
			return fmt.Errorf("pgstore: take the migration lock: %w", err)
		}
		if got {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgstore: waiting for another node's migration to finish: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// applyNoTx applies a migration marked noTx: each statement on its own,
// then its row. One that fails half-way is applied again from its start
// by the next Migrate (its statements are safe to repeat).
func applyNoTx(ctx context.Context, conn *pgx.Conn, m migration) error {
	for _, st := range statements(m.sql) {
		if _, err := conn.Exec(ctx, st); err != nil {
			return fmt.Errorf("pgstore: apply migration %s (outside a transaction; run migrate again to finish it): %w", m.name, err)
		}
	}
	if _, err := conn.Exec(ctx, "INSERT INTO runlog_schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
		return fmt.Errorf("pgstore: record migration %s: %w", m.name, err)
	}
	return nil
}

// currentVersion reads the newest applied migration, 0 for none (or when the
// table does not exist).
func currentVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass('runlog_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return 0, fmt.Errorf("pgstore: read the schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, "SELECT COALESCE(max(version), 0) FROM runlog_schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("pgstore: read the schema version: %w", err)
	}
	return v, nil
}
