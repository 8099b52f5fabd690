package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/runlog/runlog/internal/store/pgstore"
	"github.com/runlog/runlog/postgres"
)

// runMigrate applies the embedded schema migrations to a PostgreSQL
// database (idempotent; concurrent runs serialize on an advisory lock),
// or, with --plan, says what it would do and changes nothing.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("migrate", "--postgres URL [--plan]", stderr)
	url := fs.String("postgres", "", "the PostgreSQL connection `URL`")
	plan := fs.Bool("plan", false, "say what the migrations would do and whether running nodes must stop; change nothing")
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
	if *plan {
		have, steps, err := pgstore.Plan(ctx, *url)
		if err != nil {
			fmt.Fprintf(stderr, "runlog migrate --plan: %v\n", err)
			return exitFailure
		}
		writePlan(stdout, have, steps)
		return exitOK
	}
	n, err := postgres.Migrate(ctx, *url)
	if err != nil {
		fmt.Fprintf(stderr, "runlog migrate: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "schema at version %d\n", n)
	return exitOK
}

// writePlan prints what migrate would apply to a database at schema
// version have: each step, how it runs, and whether the nodes running now
// (built for have) may keep running through it.
func writePlan(w io.Writer, have int, steps []pgstore.Step) {
	if len(steps) == 0 {
		fmt.Fprintf(w, "database at schema version %d: nothing to apply\n", have)
		return
	}
	fmt.Fprintf(w, "database at schema version %d; migrate would apply %d migration(s), to version %d:\n", have, len(steps), steps[len(steps)-1].Version)
	if have == 0 {
		fmt.Fprintln(w, "(a new database: no node runs on it yet)")
	}
	stopAt, needFrom := 0, 0
	for _, st := range steps {
		fmt.Fprintf(w, "\n%d %s\n", st.Version, st.Name)
		if st.About != "" {
			fmt.Fprintf(w, "  %s\n", wrap(st.About, 76, "  "))
		}
		if st.InTransaction {
			fmt.Fprintln(w, "  runs in one transaction: all of it or nothing; the tables it changes are locked while it runs")
		} else {
			fmt.Fprintln(w, "  runs statement by statement outside a transaction (each safe to repeat; indexes built CONCURRENTLY, without locking writes)")
		}
		needFrom = max(needFrom, st.CompatibleFrom)
		if have == 0 {
			// Nothing runs on a new database.
		} else if st.CompatibleFrom <= have {
			fmt.Fprintf(w, "  running nodes: may keep running (nodes built for schema %d or later run on version %d)\n", st.CompatibleFrom, st.Version)
		} else {
			fmt.Fprintf(w, "  running nodes: MUST STOP first: nodes built for schema below %d cannot run on version %d\n", st.CompatibleFrom, st.Version)
			if stopAt == 0 {
				stopAt = st.Version
			}
		}
	}
	fmt.Fprintln(w)
	switch {
	case have == 0:
		fmt.Fprintln(w, "verdict: creates the schema")
	case stopAt == 0:
		fmt.Fprintf(w, "verdict: online; nodes built for schema %d keep running while it applies, and after (a rolling upgrade)\n", have)
	default:
		fmt.Fprintf(w, "verdict: stop every node built for schema below %d before applying version %d\n", needFrom, stopAt)
	}
	fmt.Fprintln(w, "nothing was changed; run `runlog migrate --postgres URL` to apply")
}

// wrap breaks s into lines of at most width runes at spaces, each line
// after the first starting with indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(s) {
		if i > 0 && n+1+len(word) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
