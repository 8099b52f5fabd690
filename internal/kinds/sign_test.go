package kinds_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// TestSignatureSpecVector checks the example of the Standard Webhooks spec:
// secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw, id
// msg_p5jXN8AQM9LWM0D4loKWxJek, timestamp 1614265330 and body
// {"test": 2432232314} sign to v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
// (also computed by hand with Python's hmac when this test was written).
func TestSignatureSpecVector(t *testing.T) {
	t.Parallel()
	key, err := kinds.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	const want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := string(kinds.AppendSignature(nil, key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`)); got != want {
		t.Fatalf("signature %s; want %s", got, want)
	}
	other, _ := kinds.ParseSecret("whsec_" + strings.Repeat("A", 32))
	got := kinds.SignatureHeader([][]byte{key, other}, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`)
	if first, _, ok := strings.Cut(got, " "); !ok || first != want {
		t.Fatalf("two keys sign %q; want %s first, a space, the other's", got, want)
	}
	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_", "whsec_!!!!", "whsec_" + strings.Repeat("A", 8), "whsec_" + strings.Repeat("A", 100)} {
		if _, err := kinds.ParseSecret(bad); !errors.Is(err, kinds.ErrInvalid) || (len(bad) > 8 && strings.Contains(err.Error(), bad[6:])) {
			t.Errorf("ParseSecret(%q) = %v; want ErrInvalid that does not repeat the secret", bad, err)
		}
	}
}

// staticSigner signs every target with the same keys.
type staticSigner [][]byte

func (s staticSigner) Keys(string) [][]byte       { return s }
func (s staticSigner) MessageID(id uint64) string { return "msg_test_" + strconv.FormatUint(id, 10) }

// delivery is what a receiver saw.
type delivery struct {
	Headers map[string]string `json:"headers"`
	Payload string            `json:"payload"`
	Secret  string            `json:"secret"`
}

// TestSignatureIndependentVerifier delivers signed jobs (one target
// answering 503 once, so that a job has two attempts) and hands what the
// receiver saw to the standardwebhooks npm package: it accepts every
// delivery under each of the two active secrets (a rotation), and rejects
// a changed body, a changed timestamp and a secret that is not active. The
// webhook-id is the same on both attempts of a job.
func TestSignatureIndependentVerifier(t *testing.T) {
	t.Parallel()
	node := nodeVerifier(t)
	secrets := []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_" + "c2Vjb25kLXNlY3JldC1mb3Itcm90YXRpb24tdGVzdHM="}
	var keys [][]byte
	for _, s := range secrets {
		k, err := kinds.ParseSecret(s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	var (
		mu   sync.Mutex
		seen []delivery
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d := delivery{Payload: string(body), Headers: map[string]string{}}
		for _, h := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
			d.Headers[h] = r.Header.Get(h)
		}
		mu.Lock()
		seen = append(seen, d)
		mu.Unlock()
		if r.URL.Path == "/flaky" && r.Header.Get(kinds.HeaderAttempt) == "1" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer recv.Close()
	r := openRunner(t, kinds.Config{Signer: staticSigner(keys)})
	for _, path := range []string{"/ok", "/flaky"} {
		id, err := r.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: recv.URL + path, Body: `{"event":"order.paid","n":` + strconv.Itoa(len(path)) + `,"text":"caf\u00e9 ✓"}`})
		if err != nil {
			t.Fatal(err)
		}
		if j := waitJob(t, r, id, finished); j.State != runlog.StateSucceeded {
			t.Fatalf("%s: %s %q", path, j.State, j.LastError)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 {
		t.Fatalf("the receiver saw %d deliveries; want 3", len(seen))
	}
	if a, b := seen[1].Headers["webhook-id"], seen[2].Headers["webhook-id"]; a == "" || a != b {
		t.Errorf("the two attempts of one job carry webhook-id %q and %q; want the same", a, b)
	}
	var cases []delivery
	var want []bool
	for _, d := range seen {
		for _, s := range secrets {
			c := d
			c.Secret = s
			cases = append(cases, c)
			want = append(want, true)
		}
		changedBody := d
		changedBody.Secret = secrets[0]
		changedBody.Payload = strings.Replace(d.Payload, "order.paid", "order.PAID", 1)
		ts, _ := strconv.ParseInt(d.Headers["webhook-timestamp"], 10, 64)
		changedTS := d
		changedTS.Secret = secrets[0]
		changedTS.Headers = map[string]string{"webhook-id": d.Headers["webhook-id"], "webhook-signature": d.Headers["webhook-signature"], "webhook-timestamp": strconv.FormatInt(ts-1, 10)}
		inactive := d
		inactive.Secret = "whsec_" + "bm90LWFuLWFjdGl2ZS1zZWNyZXQtYXQtYWxsLW5vcGU="
		cases = append(cases, changedBody, changedTS, inactive)
		want = append(want, false, false, false)
	}
	got := node(cases)
	for i := range cases {
		if (got[i] == "ok") != want[i] {
			t.Errorf("case %d (secret %s…, body %q, headers %v): verifier said %q; want accepted %v", i, cases[i].Secret[:10], cases[i].Payload, cases[i].Headers, got[i], want[i])
		}
	}
}

// nodeVerifier returns a function that runs testdata/verifier/verify.js
// with node on cases. It skips the test when node is not installed and
// fails when the verifier's npm package is (.ci/run installs both).
func nodeVerifier(t *testing.T) func([]delivery) []string {
	t.Helper()
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the independent signature verifier (npm standardwebhooks) cannot run; apt-get install nodejs npm, then npm ci in internal/kinds/testdata/verifier")
	}
	dir, _ := filepath.Abs(filepath.Join("testdata", "verifier"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Fatalf("the verifier's npm package is missing: run (cd %s && npm ci)", dir)
	}
	return func(cases []delivery) []string {
		t.Helper()
		in, _ := json.Marshal(cases)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, nodeBin, filepath.Join(dir, "verify.js"))
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node verify.js: %v\n%s", err, stderr.String())
		}
		var res []string
		if err := json.Unmarshal(out, &res); err != nil || len(res) != len(cases) {
			t.Fatalf("node verify.js printed %q (%v)", out, err)
		}
		return res
	}
}
