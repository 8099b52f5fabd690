package runlog_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEmbeddedLinksNoDatabaseDriver: a program that imports only package
// runlog (the embedded journal) links no PostgreSQL driver; that lives in
// package runlog/postgres.
func TestEmbeddedLinksNoDatabaseDriver(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", "github.com/runlog/runlog").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		// Tracing is opt-in (package otelrunlog): the library alone links
		// no OpenTelemetry either.
		if strings.Contains(pkg, "jackc/pgx") || strings.HasSuffix(pkg, "/pgstore") || strings.HasSuffix(pkg, "runlog/postgres") ||
			strings.HasPrefix(pkg, "go.opentelemetry.io/") {
			t.Errorf("package runlog links %s", pkg)
		}
	}
}
