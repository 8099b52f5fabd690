package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds cmd/runlog once per test run (go build -o into a temporary
// directory) and returns its path.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "runlog-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "runlog")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// runCLI runs the binary with args and returns its exit code, stdout and
// stderr.
func runCLI(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// serveProc is a running `runlog serve`.
type serveProc struct {
	cmd     *exec.Cmd
	url     string
	mu      sync.Mutex
	logs    bytes.Buffer
	done    chan struct{}
	waitErr error
}

var servingAddr = regexp.MustCompile(`msg="runlog serving" addr=(\S+)`)

// startServe starts `runlog serve --data dir --addr 127.0.0.1:0 args...` and
// waits until it answers /healthz.
func startServe(t testing.TB, dir string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"serve", "--data", dir, "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := servingAddr.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.kill() })
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-p.done:
		t.Fatalf("runlog serve exited at start: %v\n%s", p.waitErr, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("runlog serve did not start\n%s", p.output())
	}
	c := p.client()
	testwait.UntilWithin(t, 30*time.Second, "runlog serve to become healthy", func() (string, bool) {
		if err := c.Health(context.Background()); err != nil {
			return fmt.Sprintf("%v\n%s", err, p.output()), false
		}
		return "", true
	})
	return p
}

func (p *serveProc) client() *server.Client { return &server.Client{BaseURL: p.url} }

func (p *serveProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and returns the exit code.
func (p *serveProc) stop(t testing.TB) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("runlog serve did not stop on SIGTERM\n%s", p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}
