// Package pgdb holds what the drivers on PostgreSQL (River, runlog-pg)
// share: the server settings every PostgreSQL run reports.
package pgdb

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/runlog/runlog/bench/internal/harness"
)

// Querier is a pgx connection or pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Settings reads the server's version and durability settings.
func Settings(ctx context.Context, q Querier) []harness.Setting {
	var out []harness.Setting
	for _, name := range []string{"server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes"} {
		var v string
		if err := q.QueryRow(ctx, "SHOW "+name).Scan(&v); err != nil {
			v = "unknown: " + err.Error()
		}
		out = append(out, harness.Setting{Name: "postgres " + name, Value: v})
	}
	return out
}
