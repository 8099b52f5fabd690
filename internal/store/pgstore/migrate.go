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
	// compatibleFrom: nodes built for this schema version or a later one
	// run on the schema this migration leaves (an expand step: adds only);
	// older ones must stop first. The file's "-- runlog: compatible from
	// N" line; without one, the migration's own version (a contract step).
	compatibleFrom int
	// about is the file's description: its comment lines before the
	// first blank comment line, without the markers.
	about string
}

// Markers of a migration file, in its leading comment lines.
const (
	// noTxMarker runs the migration outside a transaction.
	noTxMarker = "-- runlog: no transaction"
	// compatMarker, followed by a version, sets compatibleFrom.
	compatMarker = "-- runlog: compatible from "
)

// parseHeader reads the markers and the description of a migration's SQL.
func parseHeader(m *migration) error {
	m.compatibleFrom = m.version
	var about []string
	for _, line := range strings.Split(m.sql, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == noTxMarker:
			m.noTx = true
		case strings.HasPrefix(t, compatMarker):
			v, err := strconv.Atoi(strings.TrimPrefix(t, compatMarker))
			if err != nil || v < 1 || v > m.version {
				return fmt.Errorf("pgstore: migration %s: %q must name a version from 1 to %d", m.name, t, m.version)
			}
			m.compatibleFrom = v
		case strings.HasPrefix(t, "--"):
			text := strings.TrimSpace(strings.TrimPrefix(t, "--"))
			if text == "" && len(about) > 0 {
				m.about = strings.Join(about, " ")
				return nil
			}
			if text != "" && m.about == "" {
				about = append(about, text)
			}
		default:
			m.about = strings.Join(about, " ")
			return nil
		}
	}
	m.about = strings.Join(about, " ")
	return nil
}

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
		m := migration{version: v, name: base, sql: string(b)}
		if err := parseHeader(&m); err != nil {
			return nil, err
		}
		out = append(out, m)
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
// runlog_schema_migrations (or, marked so, statement by statement outside
// one), under a session advisory lock so that concurrent callers apply
// each migration once. It returns the schema version reached. A database
// ahead of this build is left as it is: Migrate returns its version if
// the newest migration applied there says that nodes of this build may
// run on it (an expand step), else it fails with ErrSchemaNewer.
func Migrate(ctx context.Context, url string) (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	return migrateKnown(ctx, url, ms)
}

// migrateKnown is Migrate for a build that knows the migrations ms.
func migrateKnown(ctx context.Context, url string, ms []migration) (int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("pgstore: connect to apply migrations: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrateConn(ctx, conn, ms)
}

// migrateConn is Migrate on an open connection.
func migrateConn(ctx context.Context, conn *pgx.Conn, ms []migration) (int, error) {
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
	// Which builds may run on each version, recorded for the nodes of
	// builds that do not know the migration (see checkVersion); filled in
	// for the migrations applied before the column existed.
	if _, err := conn.Exec(ctx, "ALTER TABLE runlog_schema_migrations ADD COLUMN IF NOT EXISTS compatible_from integer"); err != nil {
		return 0, fmt.Errorf("pgstore: add runlog_schema_migrations.compatible_from: %w", err)
	}
	for _, m := range ms {
		if _, err := conn.Exec(ctx, "UPDATE runlog_schema_migrations SET compatible_from = $2 WHERE version = $1 AND compatible_from IS NULL", m.version, m.compatibleFrom); err != nil {
			return 0, fmt.Errorf("pgstore: record which builds run on version %d: %w", m.version, err)
		}
	}
	have, err := currentVersion(ctx, conn)
	if err != nil {
		return 0, err
	}
	if have > len(ms) {
		return have, checkVersion(ctx, conn, have, len(ms))
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
			_, err := tx.Exec(ctx, "INSERT INTO runlog_schema_migrations (version, name, compatible_from) VALUES ($1, $2, $3)", m.version, m.name, m.compatibleFrom)
			return err
		})
		if err != nil {
			return have, fmt.Errorf("pgstore: apply migration %s (nothing of it was kept): %w", m.name, err)
		}
		have = m.version
	}
	return have, nil
}

// checkVersion reports whether a build that knows schema versions up to
// known may run on a database at version have > known: nil when every
// migration past known was an expand step that builds of known run on
// (compatible_from <= known), else ErrSchemaNewer saying what is needed.
func checkVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, have, known int) error {
	var from *int
	if err := q.QueryRow(ctx, "SELECT max(COALESCE(compatible_from, version)) FROM runlog_schema_migrations WHERE version > $1", known).Scan(&from); err != nil {
		return fmt.Errorf("pgstore: read which builds run on the schema: %w", err)
	}
	if from != nil && *from <= known {
		return nil
	}
	need := have
	if from != nil {
		need = *from
	}
	return fmt.Errorf("%w: database at version %d, which needs a build for schema %d or later; this build knows %d: upgrade runlog", ErrSchemaNewer, have, need, known)
}

// Step is one migration a database lacks, as Plan describes it.
type Step struct {
	Version int
	Name    string
	// About is the migration's description (its file's first comment).
	About string
	// InTransaction: applied in one transaction with its row (else
	// statement by statement, each safe to repeat: CREATE INDEX
	// CONCURRENTLY, which does not lock the table for writes).
	InTransaction bool
	// CompatibleFrom: nodes built for this schema version or later run on
	// the schema it leaves; older running nodes must be stopped first.
	CompatibleFrom int
}

// Plan reads the schema version of the database at url and returns it with
// the migrations this build would apply, changing nothing.
func Plan(ctx context.Context, url string) (have int, steps []Step, err error) {
	ms, err := migrations()
	if err != nil {
		return 0, nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, nil, fmt.Errorf("pgstore: connect to read the schema version: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	have, err = currentVersion(ctx, conn)
	if err != nil {
		return 0, nil, err
	}
	if have > len(ms) {
		// Ahead of this build: nothing to apply, and maybe not usable.
		return have, nil, checkVersion(ctx, conn, have, len(ms))
	}
	for _, m := range ms[have:] {
		steps = append(steps, Step{Version: m.version, Name: m.name, About: m.about, InTransaction: !m.noTx, CompatibleFrom: m.compatibleFrom})
	}
	return have, steps, nil
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
