package pgtest

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestURLGivesFreshDatabases: each URL names a new, empty database of its
// own, which is dropped when its test ends.
func TestURLGivesFreshDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var names []string
	t.Run("two", func(t *testing.T) {
		a, b := URL(t), URL(t)
		if a == b {
			t.Fatalf("two calls gave the same database %s", a)
		}
		for i, u := range []string{a, b} {
			conn, err := pgx.Connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var tables int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&tables); err != nil || tables != 0 {
				t.Fatalf("database %d is not empty: %d tables, %v", i, tables, err)
			}
			if i == 0 {
				if _, err := conn.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
					t.Fatal(err)
				}
			}
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, strings.TrimPrefix(parsed.Path, "/"))
		}
	})
	// The subtest's cleanup dropped both.
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names).Scan(&left); err != nil || left != 0 || len(names) != 2 {
		t.Fatalf("%d of the databases %v are left after their test (%v)", left, names, err)
	}
}
