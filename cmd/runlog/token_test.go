package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/authlimit"
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
	t.Parallel()
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

// TestServeThrottlesWrongTokens: the API and the dashboard share one
// limiter, so that wrong tokens count alike at every door.
func TestServeThrottlesWrongTokens(t *testing.T) {
	t.Setenv("RUNLOG_TOKEN", "t0ken")
	p := startServe(t, t.TempDir())
	from := func(source string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		tr := &http.Transport{DialContext: d.DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	stats := func(c *http.Client, token string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, p.url+"/v1/stats", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	attacker := from("127.0.0.1")
	codes := map[int]int{}
	for range 50 {
		res, _ := stats(attacker, "guess")
		codes[res.StatusCode]++
	}
	if codes[http.StatusUnauthorized] != authlimit.Budget+1 || codes[http.StatusTooManyRequests] != 50-authlimit.Budget-1 {
		t.Fatalf("50 wrong bearer tokens at once: %v; want %d checked (401), the rest 429", codes, authlimit.Budget+1)
	}
	res, body := stats(attacker, "t0ken")
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(body, `"error"`) {
		t.Errorf("the right token from the throttled address: %d, Retry-After %q, %s; want 429 with Retry-After and a JSON error", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	login, err := attacker.PostForm(p.url+"/login", url.Values{"token": {"t0ken"}})
	if err != nil {
		t.Fatal(err)
	}
	login.Body.Close()
	if login.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the dashboard's login from the address the API throttles: %d, want 429", login.StatusCode)
	}
	if res, body := stats(from("127.0.0.2"), "t0ken"); res.StatusCode != http.StatusOK {
		t.Errorf("the right token from another address: %d %s", res.StatusCode, body)
	}
}
