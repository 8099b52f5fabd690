package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
	"github.com/runlog/runlog/internal/server"
)

// demoFlags are runlog demo's knobs; the defaults finish in well under 30 s.
type demoFlags struct {
	data        localString
	jobs        int
	concurrency int
	flakyRate   float64
	maxWait     time.Duration
	keep        bool
}

// simTarget is a simulated downstream on loopback that counts deliveries.
type simTarget struct {
	name       string
	share      float64 // fraction of the demo's jobs sent here
	srv        *httptest.Server
	key        string // its breaker key
	retry      *server.RetryRequest
	deliveries atomic.Int64
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	var f demoFlags
	fs := newFlagSet("demo", "[flags]", stderr)
	fs.Var(&f.data, "data", "journal `directory` (default: a temporary one, removed at the end; RUNLOG_DATA is not read)")
	fs.IntVar(&f.jobs, "jobs", 3000, "how many http jobs to enqueue")
	fs.IntVar(&f.concurrency, "concurrency", 64, "attempts running at once")
	fs.Float64Var(&f.flakyRate, "flaky-rate", 0.2, "share of the flaky target's answers that are 503 with Retry-After")
	fs.DurationVar(&f.maxWait, "max-wait", 90*time.Second, "give up (exit 1) if the jobs have not finished by then")
	fs.BoolVar(&f.keep, "keep", false, "keep the server (API and dashboard) running after the summary, until Ctrl-C")
	pos, code, ok := parseOrExit(fs, args, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 || f.jobs < 1 {
		fs.Usage()
		return exitUsage
	}
	if err := demo(f, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "runlog demo:", err)
		return exitFailure
	}
	return exitOK
}

func demo(f demoFlags, stdout, stderr io.Writer) error {
	dir := string(f.data)
	if dir == "" {
		tmp, err := os.MkdirTemp("", "runlog-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	targets := startTargets(f.flakyRate)
	defer func() {
		for _, t := range targets {
			t.srv.Close()
		}
	}()

	// Small retry and breaker settings so that the demo shows retries,
	// breaker trips and dead jobs within seconds.
	srv, err := server.Start(server.Config{
		Dir:    dir,
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Runner: runlog.Config{
			Concurrency: f.concurrency,
			Timeout:     5 * time.Second,
			Retry:       runlog.RetryPolicy{Attempts: 5, Base: 20 * time.Millisecond, Cap: 200 * time.Millisecond},
			Breaker:     runlog.BreakerConfig{Threshold: 10, Window: time.Second, Cooldown: 300 * time.Millisecond, Probes: 2},
			// The flaky target's Retry-After: 1 holds the whole target
			// (every job of it waits); bounded to the demo's scale, so that
			// the holds show without taking most of its time.
			MaxRetryAfter: 250 * time.Millisecond,
		},
	})
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	fmt.Fprintf(stdout, "runlog demo: server on %s (dashboard at %s/), journal in %s\n", srv.URL(), srv.URL(), dir)
	for _, t := range targets {
		fmt.Fprintf(stdout, "  target %-8s %s (%.0f%% of jobs)\n", t.name, t.srv.URL, 100*t.share)
	}
	fmt.Fprintf(stdout, "enqueuing %d http jobs through POST /v1/jobs...\n", f.jobs)

	start := time.Now()
	client := &server.Client{BaseURL: srv.URL(), HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	var enqueued atomic.Int64
	enqErr := make(chan error, 1)
	go func() { enqErr <- enqueueDemoJobs(client, targets, f.jobs, &enqueued) }()

	prog := newProgress(stderr, f.jobs)
	trips := map[string]int{}
	lastState := map[string]string{}
	deadline := time.Now().Add(f.maxWait)
	var (
		stats      server.Stats
		enqDone    bool
		finishedAt time.Time
	)
	for {
		time.Sleep(pollInterval)
		if !enqDone {
			select {
			case err := <-enqErr:
				if err != nil {
					prog.finish()
					return fmt.Errorf("enqueue: %w", err)
				}
				enqDone = true
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		stats, err = client.Stats(ctx)
		var tl server.TargetList
		if err == nil {
			tl, err = client.Targets(ctx)
		}
		cancel()
		if err != nil {
			prog.finish()
			return err
		}
		open := 0
		for _, t := range tl.Targets {
			if t.State == "open" && lastState[t.Target] != "open" {
				trips[t.Target]++
			}
			if t.State != "closed" {
				open++
			}
			lastState[t.Target] = t.State
		}
		done := stats.Succeeded + stats.Failed + stats.Cancelled
		prog.update(int(enqueued.Load()), done, stats, open)
		if enqDone && done >= f.jobs {
			finishedAt = time.Now()
			break
		}
		if time.Now().After(deadline) {
			prog.finish()
			return fmt.Errorf("the jobs did not finish within --max-wait %v (%d of %d done)", f.maxWait, done, f.jobs)
		}
	}
	prog.finish()
	retried, err := countRetried(client)
	if err != nil {
		return err
	}
	wall := finishedAt.Sub(start)
	totalTrips := 0
	for _, n := range trips {
		totalTrips += n
	}
	fmt.Fprintf(stdout, "\nsummary\n")
	fmt.Fprintf(stdout, "  jobs          %d\n", f.jobs)
	fmt.Fprintf(stdout, "  succeeded     %d\n", stats.Succeeded)
	fmt.Fprintf(stdout, "  retried       %d (jobs that needed more than one attempt)\n", retried)
	fmt.Fprintf(stdout, "  failed        %d (dead: attempts or deadline spent)\n", stats.Failed)
	fmt.Fprintf(stdout, "  breaker trips %d (seen open by polling /v1/targets)\n", totalTrips)
	for _, t := range targets {
		fmt.Fprintf(stdout, "    %-8s deliveries %d, trips %d\n", t.name, t.deliveries.Load(), trips[t.key])
	}
	fmt.Fprintf(stdout, "  wall time     %v\n", wall.Round(time.Millisecond))
	fmt.Fprintf(stdout, "  throughput    %.0f jobs/s\n", float64(f.jobs)/wall.Seconds())
	if f.keep {
		fmt.Fprintf(stdout, "\nthe server keeps running: dashboard at %s/, API at %s/v1/jobs; Ctrl-C stops it\n", srv.URL(), srv.URL())
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		<-ctx.Done()
		stop()
	}
	return nil
}

// startTargets starts the three simulated targets: healthy (always 200),
// flaky (503 with Retry-After: 1 at flakyRate, else 200) and down (always
// 503).
func startTargets(flakyRate float64) []*simTarget {
	healthy := &simTarget{name: "healthy", share: 0.6}
	flaky := &simTarget{name: "flaky", share: 0.3}
	// Jobs for the down target give up 3 s after they are due: its breaker
	// keeps them from hammering it, and the deadline ends them.
	down := &simTarget{name: "down", share: 0.1, retry: &server.RetryRequest{Deadline: "3s"}}
	serve := func(t *simTarget, h func(w http.ResponseWriter)) {
		t.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.deliveries.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			h(w)
		}))
		t.key, _ = kinds.HTTPTarget(t.srv.URL)
	}
	serve(healthy, func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) })
	serve(flaky, func(w http.ResponseWriter) {
		if rand.Float64() < flakyRate {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	serve(down, func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) })
	return []*simTarget{healthy, flaky, down}
}

// enqueueDemoJobs enqueues n jobs spread over the targets by their shares,
// from 64 concurrent connections.
func enqueueDemoJobs(c *server.Client, targets []*simTarget, n int, enqueued *atomic.Int64) error {
	const workers = 64
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := pickTarget(targets, i)
				req := server.JobRequest{Kind: "http", URL: t.srv.URL + "/hook", Body: fmt.Sprintf(`{"demo":%d}`, i), Key: fmt.Sprintf("demo-%d", i), Retry: t.retry}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := c.Enqueue(ctx, req)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				enqueued.Add(1)
			}
		}()
	}
	var err error
loop:
	for i := range n {
		select {
		case next <- i:
		case err = <-errs:
			break loop
		}
	}
	close(next)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	return err
}

// pickTarget maps job i onto a target by the targets' shares, interleaving
// them so that every target gets jobs from the start.
func pickTarget(targets []*simTarget, i int) *simTarget {
	x := float64(i%100) / 100
	for _, t := range targets {
		if x < t.share {
			return t
		}
		x -= t.share
	}
	return targets[len(targets)-1]
}

// countRetried counts the jobs that needed more than one attempt.
func countRetried(c *server.Client) (int, error) {
	n := 0
	q := server.ListQuery{Limit: 1000}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		page, err := c.List(ctx, q)
		cancel()
		if err != nil {
			return 0, err
		}
		for _, j := range page.Jobs {
			if j.Attempts > 1 {
				n++
			}
		}
		if page.Next == "" {
			return n, nil
		}
		q.After = page.Next
	}
}

// pollInterval is how often the demo reads the server's stats and
// targets (often enough to see most breaker trips).
const pollInterval = 100 * time.Millisecond

// progress shows the demo's progress on stderr: a bar redrawn at every poll
// on a terminal, a plain line every second otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	total int
	last  time.Time // when the last plain line was printed
	drawn bool
}

func newProgress(w io.Writer, total int) *progress {
	return &progress{w: w, total: total, tty: isTerminal(w)}
}

func (p *progress) update(enqueued, done int, s server.Stats, breakersNotClosed int) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kenqueued %s %5d  finished %s %5d/%d  ok %d  failed %d  running %d  breakers not closed %d",
			bar(enqueued, p.total, 15), enqueued, bar(done, p.total, 25), done, p.total, s.Succeeded, s.Failed, s.Running, breakersNotClosed)
		p.drawn = true
		return
	}
	if time.Since(p.last) < time.Second && done < p.total {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "progress: enqueued %d/%d, finished %d (succeeded %d, failed %d), pending %d, running %d, breakers not closed %d\n",
		enqueued, p.total, done, s.Succeeded, s.Failed, s.Pending, s.Running, breakersNotClosed)
}

func (p *progress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// bar draws n of total as a bar of width cells.
func bar(n, total, width int) string {
	full := 0
	if total > 0 {
		full = min(width, n*width/total)
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat(".", width-full) + "]"
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
