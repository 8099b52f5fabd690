package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/testwait"
)

// signedDelivery is what a receiver saw of a delivery.
type signedDelivery struct {
	id, ts, sig, body string
}

// signedBy reports which of secrets produced the signatures of d (in the
// order of the header), failing the test on one that none produced.
func signedBy(t *testing.T, d signedDelivery, secrets map[string]string) []string {
	t.Helper()
	ts, err := strconv.ParseInt(d.ts, 10, 64)
	if err != nil {
		t.Fatalf("webhook-timestamp %q: %v", d.ts, err)
	}
	var names []string
	for _, sig := range strings.Fields(d.sig) {
		found := ""
		for name, secret := range secrets {
			key, _ := kinds.ParseSecret(secret)
			if string(kinds.AppendSignature(nil, key, d.id, ts, d.body)) == sig {
				found = name
			}
		}
		if found == "" {
			t.Fatalf("signature %q matches none of the secrets", sig)
		}
		names = append(names, found)
	}
	return names
}

// TestSigningSecrets drives the secrets API: the default secret signs a
// target without its own; PUT gives it its own (the default no longer
// signs it); a second PUT starts a rotation (both sign); DELETE retires
// one. GET /v1/targets lists ids and times, never a secret, and neither do
// the logs, the journal or the dump; the secrets survive a restart in a
// file of mode 0600.
func TestSigningSecrets(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"default": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		"A":       "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=",
		"B":       "whsec_" + "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
	}
	var (
		mu   sync.Mutex
		seen []signedDelivery
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, signedDelivery{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), string(body)})
		mu.Unlock()
	}))
	defer recv.Close()
	target, _ := kinds.HTTPTarget(recv.URL)
	dir := t.TempDir()
	var logs bytes.Buffer
	var logMu sync.Mutex
	start := func() (*Server, *Client) {
		srv, err := Start(Config{Dir: dir, Addr: "127.0.0.1:0", SigningSecret: secrets["default"],
			Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		return srv, &Client{BaseURL: srv.URL()}
	}
	srv, c := start()
	ctx := context.Background()
	deliver := func(body string) signedDelivery {
		t.Helper()
		created, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: recv.URL + "/hook", Body: body})
		if err != nil {
			t.Fatal(err)
		}
		testwait.For(t, "the delivery", func() bool {
			j, err := c.Job(ctx, created.ID)
			return err == nil && j.State == runlog.StateSucceeded
		})
		mu.Lock()
		defer mu.Unlock()
		d := seen[len(seen)-1]
		if d.body != body || !strings.HasSuffix(d.id, "_"+strconv.FormatUint(created.ID, 10)) {
			t.Fatalf("last delivery %+v is not job %d's", d, created.ID)
		}
		return d
	}
	wantSigners := func(d signedDelivery, want ...string) {
		t.Helper()
		if got := signedBy(t, d, secrets); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("delivery %q signed by %v; want %v", d.body, got, want)
		}
	}
	targetOf := func() Target {
		t.Helper()
		list, err := c.Targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, tg := range list.Targets {
			if tg.Target == target {
				return tg
			}
		}
		t.Fatalf("GET /v1/targets does not list %s: %+v", target, list)
		return Target{}
	}

	wantSigners(deliver(`{"n":1}`), "default")
	a, err := c.PutSecret(ctx, recv.URL+"/any/path", secrets["A"])
	if err != nil || a.Target != target || !strings.HasPrefix(a.SecretID, "sec_") || a.Secret != "" || a.CreatedAt.IsZero() {
		t.Fatalf("PUT A: %+v, %v", a, err)
	}
	wantSigners(deliver(`{"n":2}`), "A")
	b, err := c.PutSecret(ctx, target, secrets["B"])
	if err != nil || len(b.Active) != 2 {
		t.Fatalf("PUT B: %+v, %v", b, err)
	}
	wantSigners(deliver(`{"n":3}`), "A", "B")
	tg := targetOf()
	if tg.Signing != "own" || len(tg.Secrets) != 2 || tg.Secrets[0].ID != a.SecretID || tg.Secrets[1].ID != b.SecretID {
		t.Errorf("during the rotation GET /v1/targets shows %+v", tg)
	}
	var apiErr *APIError
	if _, err := c.PutSecret(ctx, target, "whsec_short"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || strings.Contains(apiErr.Message, "short") {
		t.Errorf("PUT of a bad secret: %v; want 400 that does not repeat it", err)
	}
	if _, err := c.DeleteSecret(ctx, target, "sec_nosuch"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Errorf("DELETE of an unknown id: %v; want 404", err)
	}
	if left, err := c.DeleteSecret(ctx, target, a.SecretID); err != nil || len(left.Active) != 1 || left.Active[0].ID != b.SecretID {
		t.Fatalf("DELETE A: %+v, %v", left, err)
	}
	wantSigners(deliver(`{"n":4}`), "B")
	made, err := c.PutSecret(ctx, "custom-target", "")
	if err != nil || !strings.HasPrefix(made.Secret, kinds.SecretPrefix) {
		t.Fatalf("PUT without a secret: %+v, %v", made, err)
	}
	secrets["made"] = made.Secret
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	srv, c = start()
	defer srv.Shutdown(ctx)
	wantSigners(deliver(`{"n":5}`), "B")
	if tg := targetOf(); len(tg.Secrets) != 1 || tg.Secrets[0].ID != b.SecretID {
		t.Errorf("after a restart GET /v1/targets shows %+v", tg)
	}
	st, err := os.Stat(filepath.Join(dir, SecretsFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v, mode %v; want 0600", SecretsFile, err, st.Mode())
	}
	// Only the secrets file holds a secret; not the journal, not the logs,
	// not an answer of the API.
	var answers bytes.Buffer
	for _, path := range []string{"/v1/targets", "/v1/jobs?limit=100", "/v1/stats"} {
		resp, err := http.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(&answers, resp.Body)
		resp.Body.Close()
	}
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == SecretsFile {
			return err
		}
		b, _ := os.ReadFile(path)
		for name, s := range secrets {
			if name != "default" && bytes.Contains(b, []byte(strings.TrimPrefix(s, kinds.SecretPrefix))) {
				t.Errorf("%s holds secret %s", path, name)
			}
		}
		return nil
	})
	logMu.Lock()
	logText := logs.String()
	logMu.Unlock()
	for name, s := range secrets {
		key := strings.TrimPrefix(s, kinds.SecretPrefix)
		if strings.Contains(answers.String(), key) || strings.Contains(logText, key) {
			t.Errorf("secret %s is in an API answer or the logs", name)
		}
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
