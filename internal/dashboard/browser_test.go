package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// browserTest is the setup every browser test starts from (startBrowser):
// Chromium's path and where the screenshots go.
type browserTest struct {
	t        *testing.T
	chromium string
	shots    string
}

// startBrowser starts a browser test: it runs t in parallel, skips it in
// -short mode or when Chromium is not installed, and returns the setup.
// Make the server (startServer, startDashboardServer) and its jobs first,
// then open the tab (browserTest.tab), which has 45 s for the whole test.
func startBrowser(t *testing.T) *browserTest {
	t.Parallel()
	return &browserTest{t: t, chromium: chromiumOrSkip(t), shots: screenshots(t)}
}

// tab opens a headless Chromium tab that saves its screenshots where the
// test's go (newTab).
func (b *browserTest) tab() *tab { return newTab(b.t, b.chromium, b.shots) }

// startServer starts a runlog server in the test, in a temporary
// directory on a free loopback port with its logs dropped, from cfg (its
// Dir, Addr and Logger are filled in), and shuts it down at the end.
func startServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	cfg.Dir, cfg.Addr, cfg.Logger = t.TempDir(), "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// chromiumOrSkip returns chromium's path, or skips the test.
func chromiumOrSkip(t *testing.T) string {
	if testing.Short() {
		t.Skip("browser test: skipped in -short mode")
	}
	c := chromiumPath()
	if c == "" {
		t.Skip("chromium is not installed: apt-get install -y chromium (.ci/run installs it) or set RUNLOG_CHROMIUM")
	}
	return c
}

// screenshots is where the browser tests save their PNGs: RUNLOG_SCREENSHOTS
// (docs/img refreshes the documentation's), else a temporary directory.
func screenshots(t *testing.T) string {
	if s := os.Getenv("RUNLOG_SCREENSHOTS"); s != "" {
		if err := os.MkdirAll(s, 0o755); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return t.TempDir()
}
