package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/server"
)

// TestKill9Loop kills `runlog serve` with SIGKILL while jobs are being
// enqueued and delivered, restarts it on the same journal, and checks that
// every job whose enqueue got a 2xx exists after the restart and succeeds,
// and that a job is delivered more than once only when an attempt of it was
// cut by a kill (every delivery but one belongs to an attempt that did not
// succeed).
func TestKill9Loop(t *testing.T) {
	t.Parallel()
	cycles := 6
	if testing.Short() {
		cycles = 3
	}
	if s := os.Getenv("RUNLOG_KILL_CYCLES"); s != "" {
		cycles, _ = strconv.Atoi(s)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RUNLOG_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set RUNLOG_SEED to replay the kill timings), %d cycles", seed, cycles)
	rng := rand.New(rand.NewPCG(seed, 1))

	// Every delivery is signed (Standard Webhooks) and the target checks
	// each signature and that a job keeps its webhook-id across attempts.
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := kinds.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	secretFile := filepath.Join(t.TempDir(), "signing-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := newSignedRecorder(t, key)
	dir := t.TempDir()
	args := []string{"--signing-secret-file", secretFile, "--retry-attempts", "50", "--retry-base", "1ms", "--retry-cap", "5ms", "--breaker-threshold", "100000", "--concurrency", "16"}
	var acked []uint64
	for cycle := range cycles {
		p := startServe(t, dir, args...)
		c := p.client()
		// Everything acknowledged so far survived the kills.
		for _, id := range acked {
			if _, err := c.Job(context.Background(), id); err != nil {
				t.Fatalf("cycle %d: acknowledged job %d lost: %v\n%s", cycle, id, err, p.output())
			}
		}
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			stop = make(chan struct{})
		)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					created, err := c.Enqueue(context.Background(), server.JobRequest{
						Kind: "http", URL: rec.srv.URL + "/ok", Key: fmt.Sprintf("c%d-g%d-%d", cycle, g, i), Body: fmt.Sprintf(`{"cycle":%d,"g":%d,"i":%d}`, cycle, g, i),
					})
					if err != nil {
						var apiErr *server.APIError
						if errors.As(err, &apiErr) {
							t.Errorf("enqueue answered %v", err)
						}
						return // the server is gone
					}
					mu.Lock()
					acked = append(acked, created.ID)
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond) // under test: a kill at a random moment of the load
		p.kill()
		close(stop)
		wg.Wait()
	}
	if len(acked) == 0 {
		t.Fatal("no enqueue was acknowledged")
	}

	p := startServe(t, dir, args...)
	c := p.client()
	waitAllFinished(t, c)
	repeated := 0
	for _, id := range acked {
		j, err := c.Job(context.Background(), id)
		if err != nil {
			t.Fatalf("acknowledged job %d lost: %v", id, err)
		}
		d := rec.deliveries(id)
		successes := 0
		for _, a := range j.History {
			if a.Outcome == "success" {
				successes++
			}
		}
		switch {
		case j.State != "succeeded":
			t.Errorf("job %d ended %s (%s); want succeeded", id, j.State, j.LastError)
		case d < 1:
			t.Errorf("job %d succeeded without a delivery", id)
		case successes != 1:
			t.Errorf("job %d has %d successful attempts", id, successes)
		case d > j.Attempts:
			t.Errorf("job %d delivered %d times in %d attempts: a delivery without an attempt", id, d, j.Attempts)
		}
		if d > 1 {
			repeated++
		}
	}
	rec.mu.Lock()
	bad := rec.badSigs
	rec.mu.Unlock()
	if bad > 0 {
		t.Errorf("%d deliveries had a bad signature or changed their job's webhook-id", bad)
	}
	t.Logf("%d acknowledged jobs over %d kills; %d delivered more than once (each after a cut attempt)", len(acked), cycles, repeated)
	if code := p.stop(t); code != 0 {
		t.Fatalf("final stop exit %d\n%s", code, p.output())
	}
	if code, out, errOut := runCLI(t, nil, "journal", "verify", dir); code != 0 {
		t.Fatalf("journal verify after the kill loop: exit %d\n%s%s", code, out, errOut)
	}
}
