// Package pgtest gives tests a fresh, empty PostgreSQL database.
//
// URL(t) creates a database with a random name on the server named by
// RUNLOG_TEST_POSTGRES_URL (any database of it; the user must be allowed to
// CREATE DATABASE) and drops it when the test ends. Without that variable it
// starts a throwaway server once per test binary: initdb and pg_ctl from
// /usr/lib/postgresql/15/bin (or $RUNLOG_PG_BIN), run as the postgres user
// when the test runs as root, in a temporary directory, listening on a free
// loopback port. The server stops when Main returns, or, in a binary whose
// TestMain does not call Main, shortly after the test process exits (a
// watcher process stops it). Without PostgreSQL binaries the test is skipped
// with the reason.
//
// .ci/postgres.sh start starts such a server for a whole CI run and prints
// the export line for RUNLOG_TEST_POSTGRES_URL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the variable that points tests at an existing server.
const EnvURL = "RUNLOG_TEST_POSTGRES_URL"

// envBin overrides the directory of initdb and pg_ctl.
const envBin = "RUNLOG_PG_BIN"

// defaultBin is where Debian's postgresql-15 package puts the server.
const defaultBin = "/usr/lib/postgresql/15/bin"

// ErrNoPostgres is the reason tests are skipped when no server can be had.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL: set " + EnvURL + " to a server's URL, or install the server (apt-get install -y postgresql-15)")

var (
	once   sync.Once
	server *Server
	base   string // URL of the admin database
	setup  error
)

// URL returns the connection string of a new, empty database that is
// dropped when t ends. It skips t if no PostgreSQL is available.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if u := os.Getenv(EnvURL); u != "" {
			base = u
			return
		}
		server, setup = Start(os.TempDir())
		if setup == nil {
			base = server.URL
			setup = server.watch(os.Getpid())
		}
	})
	if errors.Is(setup, ErrNoPostgres) {
		t.Skip(setup)
	}
	if setup != nil {
		t.Fatalf("pgtest: %v", setup)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "runlog_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database on %s: %v", redact(base), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := admin(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// admin runs one statement on the admin database.
func admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// redact hides the password of a URL for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Main runs the tests of m and then stops the server URL started, if any;
// call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	if server != nil {
		server.Stop()
	}
	return code
}

// Server is a throwaway PostgreSQL server.
type Server struct {
	// URL connects to its postgres database as the superuser postgres.
	URL string
	// Dir holds its data directory and socket.
	Dir  string
	bin  string
	cred *syscall.Credential // the postgres user's, when running as root
}

// Start initializes and starts a server in a new directory under parent on
// a free loopback port, with durable settings (fsync and synchronous_commit
// on). It returns an error wrapping ErrNoPostgres when the binaries are
// missing.
func Start(parent string) (*Server, error) {
	bin := os.Getenv(envBin)
	if bin == "" {
		bin = defaultBin
	}
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		return nil, fmt.Errorf("%w (no initdb in %s)", ErrNoPostgres, bin)
	}
	dir, err := os.MkdirTemp(parent, "runlog-pg-")
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		// initdb refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w (running as root, and there is no postgres user to run the server as)", ErrNoPostgres)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if out, err := s.run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c max_connections=300 -c fsync=on -c synchronous_commit=on", port, dir)
	if out, err := s.run("pg_ctl", "-D", data, "-l", filepath.Join(dir, "log"), "-o", opts, "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return s, nil
}

// run runs one of the server's binaries as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.Dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// Stop stops the server at once and removes its directory.
func (s *Server) Stop() error {
	_, err := s.run("pg_ctl", "-D", filepath.Join(s.Dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(s.Dir)
	return err
}

// watch starts a detached process that stops the server once process pid
// has exited, so that a test binary that does not call Main leaves nothing
// running.
func (s *Server) watch(pid int) error {
	script := fmt.Sprintf(`while [ -d /proc/%d ]; do sleep 1; done; %s -D %s -m immediate -w stop >/dev/null 2>&1; rm -rf %s`,
		pid, filepath.Join(s.bin, "pg_ctl"), filepath.Join(s.Dir, "data"), s.Dir)
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: s.cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start the server's watcher: %w", err)
	}
	return cmd.Process.Release()
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
