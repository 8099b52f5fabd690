package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/runlog/runlog/postgres"
)

// runMigrate applies the embedded schema migrations to a PostgreSQL
// database (idempotent; concurrent runs serialize on an advisory lock).
func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "--postgres URL", stderr)
	url := fs.String("postgres", "", "the PostgreSQL connection `URL`")
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if err := (argSpec{}).check(pos); err != nil {
		return usageFail(fs, "migrate", err, stderr)
	}
	if *url == "" {
		return usageFail(fs, "migrate", errors.New("missing --postgres URL (or RUNLOG_POSTGRES)"), stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := postgres.Migrate(ctx, *url)
	if err != nil {
		fmt.Fprintf(stderr, "runlog migrate: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "schema at version %d\n", n)
	return exitOK
}
