package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serveOutcome runs `runlog serve` on a loopback port with args and env and
// reports whether it started serving (then it is killed at once) or else
// its exit code and stderr.
func serveOutcome(t *testing.T, env []string, args ...string) (started bool, code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), append([]string{"serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "RUNLOG_TOKEN=", "RUNLOG_TOKEN_FILE=")
	cmd.Env = append(cmd.Env, env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if servingAddr.MatchString(sc.Text()) {
			started = true
			_ = cmd.Process.Kill()
			break
		}
	}
	_ = cmd.Wait()
	return started, cmd.ProcessState.ExitCode(), out.String()
}

func TestServeRefusesBlankToken(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty, newline, blanks := file("empty", ""), file("newline", "\n"), file("blanks", " \t\r\n \n")
	tests := []struct {
		name string
		env  []string
		args []string
		want string // in the error
	}{
		{"empty --token-file", nil, []string{"--token-file", empty}, "is empty"},
		{"--token-file with a newline only", nil, []string{"--token-file", newline}, "is empty"},
		{"--token-file with white space only", nil, []string{"--token-file", blanks}, "is empty"},
		{"RUNLOG_TOKEN_FILE of an empty file", []string{"RUNLOG_TOKEN_FILE=" + empty}, nil, "is empty"},
		{"--token of blanks", nil, []string{"--token", "  \t "}, "only white space"},
		{"RUNLOG_TOKEN of blanks", []string{"RUNLOG_TOKEN=   "}, nil, "RUNLOG_TOKEN is set but only white space"},
		{"RUNLOG_TOKEN_FILE of blanks", []string{"RUNLOG_TOKEN_FILE=  "}, nil, "RUNLOG_TOKEN_FILE is set but only white space"},
		{"--token with spaces around it", nil, []string{"--token", " t0ken "}, "white space"},
		{"a token file with a line break inside", nil, []string{"--token-file", file("two-lines", "t0ken\nmore\n")}, "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			started, code, errOut := serveOutcome(t, tt.env, tt.args...)
			if started {
				t.Fatalf("runlog serve started (authentication off or unusable) instead of refusing:\n%s", errOut)
			}
			if code != exitUsage || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut, exitUsage, tt.want)
			}
		})
	}
}

func TestServeTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNLOG_TOKEN", "")
	p := startServe(t, t.TempDir(), "--token-file", path)
	c := p.client()
	if _, err := c.Stats(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("no token: %v; want 401", err)
	}
	c.Token = "t0ken" // the file's trailing newline is not part of it
	if _, err := c.Stats(context.Background()); err != nil {
		t.Fatalf("the file's token: %v", err)
	}
}
