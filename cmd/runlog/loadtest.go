package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runlog/runlog/internal/server"
)

// runLoadtest (hidden) measures a running server: how many POST /v1/jobs per
// second it accepts durably from --conns connections, then how fast it
// delivers those http jobs to a no-op loopback target (started here unless
// --url names one). With --batch N each request carries N jobs
// (POST /v1/jobs/batch, one durable write per request). The jobs are due --delay after the enqueue phase ends so
// that the two phases do not overlap. Run it against a fresh data directory:
// the delivery phase waits for the server's pending and running counts to
// reach zero.
func runLoadtest(args []string, stdout, stderr io.Writer) int {
	var (
		cf       clientFlags
		conns    int
		duration time.Duration
		kind     string
		url      string
		delay    time.Duration
		deliver  bool
		batch    int
	)
	fs := newFlagSet("loadtest", "[flags]", stderr)
	cf.register(fs)
	fs.IntVar(&conns, "conns", 64, "concurrent connections enqueuing")
	fs.DurationVar(&duration, "duration", 10*time.Second, "how long to enqueue")
	fs.StringVar(&kind, "kind", "http", "job kind (http)")
	fs.StringVar(&url, "url", "", "target URL of the jobs (default: a no-op target started here)")
	fs.DurationVar(&delay, "delay", 2*time.Second, "jobs are due this long after the enqueue phase ends")
	fs.BoolVar(&deliver, "deliver", true, "also measure delivery (wait for every job to finish)")
	fs.IntVar(&batch, "batch", 1, "jobs per request; above 1 uses POST /v1/jobs/batch")
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 || conns < 1 || kind != "http" || batch < 1 || batch > server.MaxBatch {
		fs.Usage()
		return exitUsage
	}
	if err := loadtest(cf, conns, batch, duration, url, delay, deliver, stdout); err != nil {
		fmt.Fprintln(stderr, "runlog loadtest:", err)
		return exitFailure
	}
	return exitOK
}

func loadtest(cf clientFlags, conns, batch int, duration time.Duration, url string, delay time.Duration, deliver bool, stdout io.Writer) error {
	var (
		delivered atomic.Int64
		signed    atomic.Int64 // deliveries with a webhook-signature
		lastNanos atomic.Int64
	)
	ownTarget := url == ""
	if ownTarget {
		// The no-op target shares the machine's cores with the server it
		// measures.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("no-op target: %w", err)
		}
		target := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Webhook-Signature") != "" {
				signed.Add(1)
			}
			delivered.Add(1)
			lastNanos.Store(time.Now().UnixNano())
		})}
		go func() { _ = target.Serve(ln) }()
		defer target.Close()
		url = "http://" + ln.Addr().String() + "/noop"
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns}, Timeout: cf.timeout}
	c := &server.Client{BaseURL: cf.server, Token: cf.token, HTTP: hc}
	ctx := context.Background()
	if err := c.Health(ctx); err != nil {
		return fmt.Errorf("server %s is not healthy: %w", cf.server, err)
	}
	before, err := c.Stats(ctx)
	if err != nil {
		return err
	}
	if before.Pending+before.Running > 0 {
		return fmt.Errorf("the server has %d pending and %d running jobs; run the load test against a fresh --data directory", before.Pending, before.Running)
	}

	due := time.Now().Add(duration + delay)
	job := server.JobRequest{Kind: "http", URL: url, Body: "{}", RunAt: due.UTC().Format(time.RFC3339Nano)}
	path, want := "/v1/jobs", http.StatusCreated
	var body []byte
	if batch == 1 {
		body, err = serverJSON(job)
	} else {
		path = "/v1/jobs/batch"
		body, err = serverJSON(server.BatchRequest{Jobs: slices.Repeat([]server.JobRequest{job}, batch)})
	}
	if err != nil {
		return err
	}
	var (
		accepted, failed atomic.Int64
		mu               sync.Mutex
		lat              []time.Duration
		firstErr         error
		wg               sync.WaitGroup
	)
	start := time.Now()
	stop := start.Add(duration)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for time.Now().Before(stop) {
				t0 := time.Now()
				resp, err := hc.Post(cf.server+path, "application/json", bytes.NewReader(body))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != want {
						err = fmt.Errorf("POST %s answered %s", path, resp.Status)
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				accepted.Add(int64(batch))
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := accepted.Load()
	slices.Sort(lat)
	fmt.Fprintf(stdout, "enqueue: %d jobs accepted durably in %v from %d connections, %d per request = %.0f jobs/s; request latency p50 %v p99 %v; errors %d\n",
		n, elapsed.Round(time.Millisecond), conns, batch, float64(n)/elapsed.Seconds(), quantile(lat, 0.50), quantile(lat, 0.99), failed.Load())
	if firstErr != nil {
		fmt.Fprintf(stdout, "first error: %v\n", firstErr)
	}
	if !deliver || n == 0 {
		return nil
	}

	time.Sleep(time.Until(due))
	dueAt := time.Now()
	// Wait without loading the server: watch our own target's counter when
	// it is ours, and ask for the server's stats (which walk its queue)
	// only now and then.
	for ownTarget && delivered.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		s, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if s.Pending+s.Running == 0 {
			end := time.Now()
			if last := lastNanos.Load(); last != 0 {
				end = time.Unix(0, last)
			}
			took := end.Sub(dueAt)
			fmt.Fprintf(stdout, "deliver: %d jobs finished (succeeded %d, failed %d) in %v after becoming due = %.0f jobs/s; the target saw %d deliveries, %d of them signed\n",
				n, s.Succeeded-before.Succeeded, s.Failed-before.Failed, took.Round(time.Millisecond), float64(n)/took.Seconds(), delivered.Load(), signed.Load())
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// serverJSON encodes a request body as the API expects it.
func serverJSON(v any) ([]byte, error) {
	return json.Marshal(v)
}

// quantile returns the q-quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(q*float64(len(sorted)-1))].Round(time.Microsecond)
}
