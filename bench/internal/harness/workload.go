package harness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// errPlanned is the failure W3's jobs return on their first attempts.
var errPlanned = errors.New("harness: planned failure (W3 fails each job twice)")

// tracker is the Handler every system runs: it counts attempts and
// successes per job, records enqueue-to-start latencies and tells when the
// expected number of jobs has succeeded.
type tracker struct {
	// failures is how many first attempts of each job fail on purpose.
	failures int32
	// attempts and successes are per job id; nil when ids are unbounded (W2).
	attempts, successes []atomic.Int32
	// done counts jobs that succeeded (first success only when tracked).
	done atomic.Int64
	// target, once reached by done, closes reached.
	target  int64
	reached chan struct{}
	// firstStart is the Unix ns of the first attempt.
	firstStart atomic.Int64
	// lastDone is the Unix ns of the success that reached target.
	lastDone atomic.Int64
	// lat, when set and recording, collects enqueue-to-start latencies.
	lat       *samples
	recording atomic.Bool
	// release, when set, is called once per success (W2's backpressure).
	release func()
	// unknown counts payloads whose id is out of range.
	unknown atomic.Int64
}

func newTracker(n int, target int64, failures int32) *tracker {
	t := &tracker{failures: failures, target: target, reached: make(chan struct{})}
	if n > 0 {
		t.attempts = make([]atomic.Int32, n)
		t.successes = make([]atomic.Int32, n)
	}
	return t
}

func (t *tracker) handle(ctx context.Context, p Payload) error {
	now := time.Now().UnixNano()
	t.firstStart.CompareAndSwap(0, now)
	if t.lat != nil && t.recording.Load() {
		t.lat.add(now - p.EnqueuedAt)
	}
	first := true
	if t.attempts != nil {
		if p.ID < 0 || p.ID >= int64(len(t.attempts)) {
			t.unknown.Add(1)
			return nil
		}
		if a := t.attempts[p.ID].Add(1); a <= t.failures {
			return fmt.Errorf("job %d attempt %d: %w", p.ID, a, errPlanned)
		}
		first = t.successes[p.ID].Add(1) == 1
	}
	if t.release != nil {
		t.release()
	}
	if first && t.done.Add(1) == t.target {
		t.lastDone.Store(time.Now().UnixNano())
		close(t.reached)
	}
	return nil
}

// wait blocks until target jobs succeeded, ctx ends or limit passes.
func (t *tracker) wait(ctx context.Context, limit time.Duration) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-t.reached:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return fmt.Errorf("only %d of %d jobs succeeded within %s", t.done.Load(), t.target, limit)
	}
}

// account fills the exactly-once fields of r from the per-job counters;
// wantAttempts is how many attempts each job should have taken.
func (t *tracker) account(r *Result, wantAttempts int32) {
	for i := range t.successes {
		switch s := t.successes[i].Load(); {
		case s == 0:
			r.Missing++
		case s > 1:
			r.Duplicates++
		}
		if a := t.attempts[i].Load(); a > wantAttempts {
			r.ExtraAttempts += int(a - wantAttempts)
		}
	}
	if u := t.unknown.Load(); u > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d attempts carried an unknown job id", u))
	}
}

// enqueueAll enqueues jobs first..first+n-1 one per call from workers
// goroutines and returns how long it took.
func enqueueAll(ctx context.Context, d Driver, first, n int64, workers int) (time.Duration, error) {
	var next atomic.Int64
	next.Store(first)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	begin := time.Now()
	for range max(workers, 1) {
		wg.Go(func() {
			for ctx.Err() == nil {
				id := next.Add(1) - 1
				if id >= first+n {
					return
				}
				p := Payload{ID: id, EnqueuedAt: time.Now().UnixNano()}
				if err := d.Enqueue(ctx, p); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("enqueue job %d: %w", id, err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(begin), firstErr
}

// enqueueBatched enqueues jobs first..first+n-1 in batches of size from one
// goroutine and returns how long it took, or ErrNoBatch.
func enqueueBatched(ctx context.Context, d Driver, first, n int64, size int) (time.Duration, error) {
	begin := time.Now()
	batch := make([]Payload, 0, size)
	for id := first; id < first+n; id += int64(size) {
		batch = batch[:0]
		now := time.Now().UnixNano()
		for j := id; j < min(id+int64(size), first+n); j++ {
			batch = append(batch, Payload{ID: j, EnqueuedAt: now})
		}
		if err := d.EnqueueBatch(ctx, batch); err != nil {
			if errors.Is(err, ErrNoBatch) {
				return 0, err
			}
			return 0, fmt.Errorf("enqueue batch at job %d: %w", id, err)
		}
	}
	return time.Since(begin), nil
}

// W1Params sizes workload W1.
type W1Params struct {
	// N jobs are enqueued one per call, then drained; then N more are
	// enqueued in batches (not drained).
	N int
	// Concurrency is both the number of enqueuing goroutines and the
	// number of jobs the system runs at once.
	Concurrency int
	// BatchSize is the size of each batch in the batched enqueue.
	BatchSize int
	// Limit bounds the drain.
	Limit time.Duration
}

// RunW1 enqueues p.N no-op jobs one per call with the workers stopped,
// then starts the workers and drains them, then stops the workers and
// enqueues p.N more in batches. It fills the W1 fields of r.
func RunW1(ctx context.Context, d Driver, p W1Params, r *Result) error {
	begin := time.Now()
	defer func() { r.WallSeconds = time.Since(begin).Seconds() }()
	r.N = p.N
	took, err := enqueueAll(ctx, d, 0, int64(p.N), p.Concurrency)
	if err != nil {
		return err
	}
	r.EnqueueRate = Rate(p.N, took)

	t := newTracker(p.N, int64(p.N), 0)
	cpu := markCPU()
	start := time.Now()
	if err := d.Start(ctx, t.handle); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	if err := t.wait(ctx, p.Limit); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	cpu.perJob(markCPU(), p.N, r)
	r.ProcessRate = Rate(p.N, time.Unix(0, t.lastDone.Load()).Sub(start))
	if err := d.Stop(ctx); err != nil {
		return fmt.Errorf("stop workers: %w", err)
	}
	t.account(r, 1)

	took, err = enqueueBatched(ctx, d, int64(p.N), int64(p.N), p.BatchSize)
	switch {
	case errors.Is(err, ErrNoBatch): // the report shows "—"
	case err != nil:
		return err
	default:
		r.EnqueueBatchRate = Rate(p.N, took)
	}
	return nil
}

// W2Params sizes workload W2.
type W2Params struct {
	// Duration is how long producers and consumers run together.
	Duration time.Duration
	// Producers is the number of goroutines enqueuing one job per call.
	Producers int
	// Concurrency is the number of jobs the system runs at once.
	Concurrency int
	// Outstanding bounds the jobs enqueued but not yet done: a producer
	// waits when the system falls that far behind, so the latency measures
	// the system and not an ever-growing backlog.
	Outstanding int
	// Rate, if > 0, paces the producers together at Rate enqueues per
	// second (W2-paced); 0 lets each enqueue as fast as it can.
	Rate float64
}

// RunW2 runs producers and consumers at once for p.Duration and fills
// the completed rate and the enqueue-to-start percentiles of r.
func RunW2(ctx context.Context, d Driver, p W2Params, r *Result) error {
	begin := time.Now()
	defer func() { r.WallSeconds = time.Since(begin).Seconds() }()
	r.Producers, r.Outstanding, r.DurationSeconds, r.PacedRate = p.Producers, p.Outstanding, p.Duration.Seconds(), p.Rate
	t := newTracker(0, -1, 0)
	t.lat = newSamples(4 << 20)
	sem := make(chan struct{}, p.Outstanding)
	t.release = func() {
		select {
		case <-sem:
		default:
		}
	}
	if err := d.Start(ctx, t.handle); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	// paced hands out one token per enqueue at p.Rate; nil when unpaced.
	var paced chan struct{}
	if p.Rate > 0 {
		paced = make(chan struct{}, p.Producers)
		interval := time.Duration(float64(time.Second) / p.Rate)
		go func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-tick.C:
					select {
					case paced <- struct{}{}:
					default: // every producer is busy: this enqueue is skipped
					}
				case <-pctx.Done():
					return
				}
			}
		}()
	}
	t.recording.Store(true)
	cpu := markCPU()
	start := time.Now()
	doneAtStart := t.done.Load()
	for range p.Producers {
		wg.Go(func() {
			for {
				if paced != nil {
					select {
					case <-paced:
					case <-pctx.Done():
						return
					}
				}
				select {
				case sem <- struct{}{}:
				case <-pctx.Done():
					return
				}
				id := next.Add(1) - 1
				err := d.Enqueue(pctx, Payload{ID: id, EnqueuedAt: time.Now().UnixNano()})
				if err != nil {
					<-sem
					if pctx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("enqueue job %d: %w", id, err); stop() })
					}
					return
				}
			}
		})
	}
	timer := time.NewTimer(p.Duration)
	select {
	case <-timer.C:
	case <-pctx.Done():
	}
	timer.Stop()
	t.recording.Store(false)
	completed := int(t.done.Load() - doneAtStart)
	elapsed := time.Since(start)
	cpu.perJob(markCPU(), completed, r)
	stop()
	wg.Wait()
	r.Completed = completed
	r.CompleteRate = Rate(completed, elapsed)
	lat := t.lat.sorted()
	r.P50Millis = float64(Percentile(lat, 0.50)) / 1e6
	r.P99Millis = float64(Percentile(lat, 0.99)) / 1e6
	if dr := t.lat.dropped.Load(); dr > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d latency samples past the first %d were dropped", dr, len(t.lat.vals)))
	}
	if err := d.Stop(ctx); err != nil && firstErr == nil {
		firstErr = fmt.Errorf("stop workers: %w", err)
	}
	return firstErr
}

// W3Params sizes workload W3.
type W3Params struct {
	// N jobs each fail twice, then succeed.
	N int
	// Concurrency is the number of jobs the system runs at once (and of
	// enqueuing goroutines when the system has no batch enqueue).
	Concurrency int
	// BatchSize is the batch size of the enqueue, where the system has one.
	BatchSize int
	// Limit bounds the wait for every job to succeed.
	Limit time.Duration
	// Settle is how long the harness keeps watching after the last job
	// succeeded, to catch late duplicate runs.
	Settle time.Duration
}

// RunW3 enqueues p.N jobs that fail on their first two attempts, runs them
// to success and checks that each succeeded exactly once after exactly
// three attempts.
func RunW3(ctx context.Context, d Driver, p W3Params, r *Result) error {
	begin := time.Now()
	defer func() { r.WallSeconds = time.Since(begin).Seconds() }()
	r.N = p.N
	if _, err := enqueueBatched(ctx, d, 0, int64(p.N), p.BatchSize); errors.Is(err, ErrNoBatch) {
		if _, err := enqueueAll(ctx, d, 0, int64(p.N), p.Concurrency); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	t := newTracker(p.N, int64(p.N), 2)
	cpu := markCPU()
	start := time.Now()
	if err := d.Start(ctx, t.handle); err != nil {
		return fmt.Errorf("start workers: %w", err)
	}
	werr := t.wait(ctx, p.Limit)
	if werr == nil {
		cpu.perJob(markCPU(), p.N, r)
		elapsed := time.Unix(0, t.lastDone.Load()).Sub(start)
		r.Completed = p.N
		r.CompleteRate = Rate(p.N, elapsed)
		time.Sleep(p.Settle)
	} else {
		r.Completed = int(t.done.Load())
	}
	if err := d.Stop(ctx); err != nil && werr == nil {
		werr = fmt.Errorf("stop workers: %w", err)
	}
	t.account(r, 3)
	return werr
}
