package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
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
// reach zero. Each phase also reports the CPU time (user+sys) it took per
// job of this process and, with --server-pid, of the server: the figure
// that holds on a machine shared with other work, where jobs/s does not.
func runLoadtest(args []string, stdout, stderr io.Writer) int {
	var (
		lt   loadtestConfig
		kind string
	)
	fs := newFlagSet("loadtest", "[flags]", stderr)
	lt.client.register(fs)
	fs.IntVar(&lt.conns, "conns", 64, "concurrent connections enqueuing")
	fs.DurationVar(&lt.duration, "duration", 10*time.Second, "how long to enqueue")
	fs.StringVar(&kind, "kind", "http", "job kind (http)")
	fs.StringVar(&lt.url, "url", "", "target URL of the jobs (default: a no-op target started here)")
	fs.DurationVar(&lt.delay, "delay", 2*time.Second, "jobs are due this long after the enqueue phase ends")
	fs.BoolVar(&lt.deliver, "deliver", true, "also measure delivery (wait for every job to finish)")
	fs.IntVar(&lt.batch, "batch", 1, "jobs per request; above 1 uses POST /v1/jobs/batch")
	fs.IntVar(&lt.serverPID, "server-pid", 0, "the server's process `id`, on the same machine: report its CPU time per job too (read from /proc, Linux only)")
	fs.StringVar(&lt.receiver, "receiver", receiverLean, "the no-op target started here: lean (reads each HTTP/1.1 request whole on its connection's goroutine, a fraction of net/http's CPU) or net/http")
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 || lt.conns < 1 || kind != "http" || lt.batch < 1 || lt.batch > server.MaxBatch || lt.serverPID < 0 ||
		lt.receiver != receiverLean && lt.receiver != receiverNetHTTP {
		fs.Usage()
		return exitUsage
	}
	if err := loadtest(lt, stdout); err != nil {
		fmt.Fprintln(stderr, "runlog loadtest:", err)
		return exitFailure
	}
	return exitOK
}

// loadtestConfig is what runlog loadtest was asked to do (its flags).
type loadtestConfig struct {
	client          clientFlags
	conns, batch    int
	duration, delay time.Duration
	url             string // empty: a no-op target of kind receiver, here
	receiver        string
	deliver         bool
	serverPID       int // 0: the server's CPU time is not measured
}

func loadtest(lt loadtestConfig, stdout io.Writer) error {
	var target receiver
	cf, url, batch, pid := lt.client, lt.url, lt.batch, lt.serverPID
	ownTarget := url == ""
	if ownTarget {
		// The no-op target shares the machine's cores with the server it
		// measures.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("no-op target: %w", err)
		}
		go func() { _ = target.serve(ln, lt.receiver) }()
		defer ln.Close()
		url = "http://" + ln.Addr().String() + "/noop"
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: lt.conns, MaxIdleConnsPerHost: lt.conns}, Timeout: cf.timeout}
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

	due := time.Now().Add(lt.duration + lt.delay)
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
	meter := cpuMeter{serverPID: pid}
	if err := meter.start(); err != nil {
		return err
	}
	start := time.Now()
	stop := start.Add(lt.duration)
	for range lt.conns {
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
		n, elapsed.Round(time.Millisecond), lt.conns, batch, float64(n)/elapsed.Seconds(), quantile(lat, 0.50), quantile(lat, 0.99), failed.Load())
	if firstErr != nil {
		fmt.Fprintf(stdout, "first error: %v\n", firstErr)
	}
	if n > 0 {
		line, err := meter.line(n, runtime.NumCPU())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "enqueue %s\n", line)
	}
	if !lt.deliver || n == 0 {
		return nil
	}

	time.Sleep(time.Until(due))
	if err := meter.start(); err != nil {
		return err
	}
	dueAt := time.Now()
	// Wait without loading the server: watch our own target's counter when
	// it is ours, and ask for the server's stats (which walk its queue)
	// only now and then.
	for ownTarget && target.delivered.Load()+target.refused.Load() < n {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		s, err := c.Stats(ctx)
		if err != nil {
			return err
		}
		if s.Pending+s.Running == 0 {
			end := time.Now()
			if last := target.lastNanos.Load(); last != 0 {
				end = time.Unix(0, last)
			}
			took := end.Sub(dueAt)
			fmt.Fprintf(stdout, "deliver: %d jobs finished (succeeded %d, failed %d) in %v after becoming due = %.0f jobs/s; the target saw %d deliveries, %d of them signed\n",
				n, s.Succeeded-before.Succeeded, s.Failed-before.Failed, took.Round(time.Millisecond), float64(n)/took.Seconds(), target.delivered.Load(), target.signed.Load())
			if k := target.refused.Load(); k > 0 {
				fmt.Fprintf(stdout, "the target refused %d requests it could not read, the first: %v\n", k, target.firstErr)
			}
			line, err := meter.line(n, runtime.NumCPU())
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "deliver %s\n", line)
			if pid == 0 {
				return nil
			}
			// The store goes on after the last job finished (the
			// embedded store copies finished jobs out once it is quiet):
			// that work is the deliveries' too.
			time.Sleep(settle)
			if line, err = meter.line(n, runtime.NumCPU()); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "deliver and %v after %s\n", settle, line)
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// settle is how long the load test goes on measuring the server's CPU
// time after the last job finished.
const settle = 3 * time.Second

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
