// Package sqlitedb opens the SQLite databases of the SQLite-backed peers
// (goqite and River on SQLite) the same way: modernc.org/sqlite (pure Go),
// WAL journal, synchronous=FULL (each commit fsyncs the WAL, so a
// committed job survives a power cut), one connection.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/runlog/runlog/bench/internal/harness"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Open opens (creating) the SQLite database at path with durable settings.
// SQLite allows one writer at a time, and both peers recommend a single
// connection to avoid SQLITE_BUSY errors, so the pool has one.
func Open(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// Settings reads the durability settings in effect from the database.
func Settings(ctx context.Context, db *sql.DB) []harness.Setting {
	var out []harness.Setting
	for _, p := range []string{"journal_mode", "synchronous"} {
		var v string
		if err := db.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
			v = "unknown: " + err.Error()
		}
		if p == "synchronous" {
			v = map[string]string{"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}[v] + " (" + v + ")"
		}
		out = append(out, harness.Setting{Name: "sqlite " + p, Value: v})
	}
	var version string
	if err := db.QueryRowContext(ctx, "select sqlite_version()").Scan(&version); err == nil {
		out = append(out, harness.Setting{Name: "sqlite version", Value: version + " (modernc.org/sqlite, one connection)"})
	}
	return out
}
