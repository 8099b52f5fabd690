// Package asynq drives github.com/hibiken/asynq (Redis) for the benchmark.
package asynq

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/runlog/runlog/bench/internal/harness"
)

// taskType is the asynq task type of the no-op job.
const taskType = "noop"

// Tuned intervals. asynq polls per worker slot (each idle slot sleeps
// TaskCheckInterval/2 plus jitter when the queues are empty), so 1ms with
// 256 slots floods Redis with polls; 10ms is the fastest setting that
// helps rather than hurts on this machine.
const (
	tunedTaskCheck        = 10 * time.Millisecond
	tunedDelayedTaskCheck = 10 * time.Millisecond
)

func init() {
	harness.Register(harness.System{Name: "asynq", Store: "Redis", NeedsRedis: true, Open: Open})
}

var _ harness.Driver = (*driver)(nil)

type driver struct {
	cfg    harness.Config
	opt    asynq.RedisClientOpt
	rdb    *redis.Client
	client *asynq.Client
	server *asynq.Server
	// taskCheck and delayedCheck are the server's polling intervals; 0
	// leaves asynq's defaults (1s and 5s).
	taskCheck, delayedCheck time.Duration
	maxRetry                int
}

// Open connects asynq to the Redis server at cfg.RedisAddr and, when
// cfg.Fresh, empties it.
//
// Defaults: TaskCheckInterval 1s, DelayedTaskCheckInterval 5s (which also
// moves retries back to the queue), MaxRetry 25, retry delay
// exponential. Tuned: both intervals 10ms. W3 retries with delay 0 in
// both modes (the smallest backoff). The lease (30s) and the recoverer's
// period (1m) that bring back the tasks of a dead worker are constants of
// asynq and cannot be tuned.
func Open(ctx context.Context, cfg harness.Config) (harness.Driver, error) {
	d := &driver{cfg: cfg, opt: asynq.RedisClientOpt{Addr: cfg.RedisAddr, PoolSize: 64}, maxRetry: 25}
	d.rdb = redis.NewClient(&redis.Options{Addr: cfg.RedisAddr})
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		d.rdb.Close()
		return nil, fmt.Errorf("asynq: redis at %s: %w", cfg.RedisAddr, err)
	}
	if cfg.Fresh {
		if err := d.rdb.FlushAll(ctx).Err(); err != nil {
			d.rdb.Close()
			return nil, fmt.Errorf("asynq: flush redis: %w", err)
		}
	}
	if cfg.Mode == harness.ModeTuned {
		d.taskCheck, d.delayedCheck = tunedTaskCheck, tunedDelayedTaskCheck
	}
	if cfg.MaxAttempts > 0 {
		d.maxRetry = cfg.MaxAttempts - 1
	}
	d.client = asynq.NewClient(d.opt)
	return d, nil
}

func (d *driver) Enqueue(ctx context.Context, p harness.Payload) error {
	_, err := d.client.EnqueueContext(ctx, asynq.NewTask(taskType, p.Marshal()), asynq.MaxRetry(d.maxRetry))
	return err
}

// EnqueueBatch: asynq enqueues one task per call.
func (d *driver) EnqueueBatch(context.Context, []harness.Payload) error { return harness.ErrNoBatch }

func (d *driver) Start(ctx context.Context, h harness.Handler) error {
	if d.server != nil {
		return fmt.Errorf("asynq: workers already started")
	}
	cfg := asynq.Config{
		Concurrency:              d.cfg.Concurrency,
		TaskCheckInterval:        d.taskCheck,
		DelayedTaskCheckInterval: d.delayedCheck,
		LogLevel:                 asynq.WarnLevel,
	}
	if d.cfg.Workload == harness.W3 {
		cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 0 }
	}
	srv := asynq.NewServer(d.opt, cfg)
	mux := asynq.NewServeMux()
	mux.HandleFunc(taskType, func(ctx context.Context, t *asynq.Task) error {
		p, err := harness.ParsePayload(t.Payload())
		if err != nil {
			return err
		}
		return h(ctx, p)
	})
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("asynq start: %w", err)
	}
	d.server = srv
	return nil
}

func (d *driver) Stop(context.Context) error {
	if d.server == nil {
		return nil
	}
	d.server.Shutdown()
	d.server = nil
	return nil
}

func (d *driver) Close(ctx context.Context) error {
	err := d.Stop(ctx)
	if cerr := d.client.Close(); err == nil {
		err = cerr
	}
	if cerr := d.rdb.Close(); err == nil {
		err = cerr
	}
	return err
}

func (d *driver) Settings(ctx context.Context) []harness.Setting {
	var out []harness.Setting
	for _, key := range []string{"appendonly", "appendfsync"} {
		v := "unknown"
		if m, err := d.rdb.ConfigGet(ctx, key).Result(); err == nil {
			v = m[key]
		}
		out = append(out, harness.Setting{Name: "redis " + key, Value: v})
	}
	if info, err := d.rdb.Info(ctx, "server").Result(); err == nil {
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				out = append(out, harness.Setting{Name: "redis version", Value: v})
			}
		}
	}
	show := func(d, def time.Duration) string {
		if d == 0 {
			return def.String() + " (default)"
		}
		return d.String()
	}
	out = append(out,
		harness.Setting{Name: "asynq TaskCheckInterval", Value: show(d.taskCheck, time.Second)},
		harness.Setting{Name: "asynq DelayedTaskCheckInterval", Value: show(d.delayedCheck, 5*time.Second)},
	)
	if d.cfg.Workload == harness.W3 {
		out = append(out, harness.Setting{Name: "asynq RetryDelayFunc", Value: "0 (retry moved back by the next delayed-task check)"})
	}
	if d.cfg.Workload == harness.W4 {
		out = append(out, harness.Setting{Name: "asynq crash recovery", Value: "lease 30s + recoverer every 1m (constants)"})
	}
	return out
}
