package main

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/pgtest"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// downtime is one kill of the server: from the SIGKILL until the restarted
// server answered /healthz.
type downtime struct{ killed, back time.Time }

// TestScheduleKill9 (issue 17): two 1 s schedules, one with catch-up all and
// one with catch-up latest, run on `runlog serve` while it is killed with
// SIGKILL at random moments and restarted on the same journal after a
// random downtime. Afterwards:
// every tick of the all schedule in that time has exactly one job; every
// tick of the latest schedule has at most one, and each tick without one
// was missed while the server was down and was followed by a job made late
// (the latest tick, run once on the restart), which is what catch-up latest
// says. The default run is short (30 s, 6 kills); RUNLOG_SCHEDULE_KILL_SECONDS
// and RUNLOG_SCHEDULE_KILLS give the 300 s and 30 kills.
func TestScheduleKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	scheduleKill(t, 1, func() *serveProc { return startServe(t, dir) })
}

// TestScheduleKill9ThreeNodesPostgres is TestScheduleKill9 with three
// `runlog serve` nodes on one PostgreSQL database, killed in turn: the
// nodes have no leader, and each tick is made by one of them once.
func TestScheduleKill9ThreeNodesPostgres(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	scheduleKill(t, 3, func() *serveProc { return startServe(t, t.TempDir(), "--postgres", url) })
}

// scheduleKill runs the schedule kill test on n nodes that start opens.
func scheduleKill(t *testing.T, n int, start func() *serveProc) {
	seconds, kills := 30, 6
	if testing.Short() {
		seconds, kills = 10, 3
	}
	if s := os.Getenv("RUNLOG_SCHEDULE_KILL_SECONDS"); s != "" {
		seconds, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("RUNLOG_SCHEDULE_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("RUNLOG_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (RUNLOG_SEED replays the kill timings), %d nodes, %d s, %d kills", seed, n, seconds, kills)
	rng := rand.New(rand.NewPCG(seed, 2))
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(target.Close)
	ctx := context.Background()

	nodes := make([]*serveProc, n)
	for i := range nodes {
		nodes[i] = start()
	}
	job := []byte(`{"kind":"http","url":"` + target.URL + `/tick"}`)
	created := map[string]time.Time{}
	for _, catchUp := range []string{"all", "latest"} {
		s, err := nodes[0].client().CreateSchedule(ctx, server.ScheduleRequest{Name: catchUp, Every: "1s", CatchUp: catchUp, Job: job})
		if err != nil {
			t.Fatal(err)
		}
		created[catchUp] = s.CreatedAt
	}
	begin := time.Now()
	end := begin.Add(time.Duration(seconds) * time.Second)
	var downs []downtime
	for k := range kills {
		// Kill node k mod n at a random moment of the k-th slice of the run.
		slice := time.Duration(seconds) * time.Second / time.Duration(kills)
		at := begin.Add(time.Duration(k)*slice + time.Duration(rng.Int64N(int64(slice))))
		time.Sleep(time.Until(at)) // under test: the kill lands at a random moment
		nodes[k%n].kill()
		d := downtime{killed: time.Now()}
		// Down for up to 2.5 s more, so that ticks are missed while
		// nothing runs and the catch-up rules are put to work.
		time.Sleep(time.Duration(rng.Int64N(int64(2500 * time.Millisecond)))) // under test: a random downtime
		nodes[k%n] = start()
		d.back = time.Now()
		downs = append(downs, d)
	}
	time.Sleep(time.Until(end)) // under test: the schedules run to the end of the period
	c := nodes[0].client()
	for name := range created {
		testwait.UntilWithin(t, 30*time.Second, "schedule "+name+" to reach the end of the run", func() (string, bool) {
			s, err := c.Schedule(ctx, name)
			return s.LastTick.String(), err == nil && !s.LastTick.Before(end.Add(-time.Second))
		})
	}
	// With one node, a tick may be missed only during a downtime.
	within := func(tick time.Time) bool {
		for _, d := range downs {
			if !tick.Before(d.killed.Add(-time.Second)) && !tick.After(d.back.Add(time.Second)) {
				return true
			}
		}
		return false
	}
	for name, start := range created {
		jobs := allScheduleJobs(t, c, name)
		byTick := map[int64]server.Job{}
		last := int64(0)
		for _, j := range jobs {
			off := j.Tick.Sub(start)
			if off%time.Second != 0 || off <= 0 {
				t.Fatalf("%s: job %d has tick %v, not on the schedule's grid", name, j.ID, j.Tick)
			}
			k := int64(off / time.Second)
			if other, dup := byTick[k]; dup {
				t.Fatalf("%s: tick %d made two jobs, %d and %d", name, k, other.ID, j.ID)
			}
			byTick[k] = j
			last = max(last, k)
		}
		missing := 0
		for k := int64(1); k <= last; k++ {
			if _, ok := byTick[k]; ok {
				continue
			}
			missing++
			tick := start.Add(time.Duration(k) * time.Second)
			if name == "all" {
				t.Errorf("all: tick %d (%v) has no job; catch-up all runs every missed tick", k, tick)
				continue
			}
			// latest: the tick was missed while the server was down, and
			// the next tick that has a job was made once the server was
			// back, after the missed one's successor came due.
			next := k + 1
			for ; next <= last; next++ {
				if _, ok := byTick[next]; ok {
					break
				}
			}
			j := byTick[next]
			if n > 1 {
				// The nodes are killed in turn, so one was always up: a
				// tick is missed only if every node noticed it late (a
				// loaded machine); catch-up latest then made the next one,
				// late, as checked above.
				t.Logf("latest: tick %d (%v) was noticed late by every node; the next job (tick %d) was made at %v", k, tick, next, j.EnqueuedAt)
			} else if !within(tick) {
				t.Errorf("latest: tick %d (%v) has no job, but a node was up then; the next job (tick %d) was made at %v; downtimes %v",
					k, tick, next, j.EnqueuedAt, downs)
			}
			if j.EnqueuedAt.Before(start.Add(time.Duration(k+1) * time.Second)) {
				t.Errorf("latest: tick %d has no job, but the next job (tick %d) was made at %v, before tick %d was due", k, next, j.EnqueuedAt, k+1)
			}
		}
		if last < int64(seconds)-1 {
			t.Errorf("%s: the last tick with a job is %d, the run lasted %d s", name, last, seconds)
		}
		t.Logf("%s: %d ticks, %d jobs, %d ticks skipped by the catch-up rule", name, last, len(jobs), missing)
	}
}

// allScheduleJobs lists every job of schedule name, oldest first.
func allScheduleJobs(t *testing.T, c *server.Client, name string) []server.Job {
	t.Helper()
	var out []server.Job
	after := ""
	for {
		page, err := c.List(context.Background(), server.ListQuery{Schedule: name, Order: "oldest", Limit: 1000, After: after})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page.Jobs...)
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// TestCLISchedules runs the schedule commands against `runlog serve`.
func TestCLISchedules(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir())
	srv := []string{"--server", p.url}
	run := func(args ...string) (int, string, string) {
		return runCLI(t, nil, append(args, srv...)...)
	}
	code, out, errOut := run("schedule", "create", "nightly", "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--url", "https://example.com/report", "--overlap", "skip")
	if code != 0 || !strings.Contains(out, "0 3 * * * (Europe/Paris)") || !strings.Contains(out, "next:") {
		t.Fatalf("schedule create: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = run("schedule", "create", "nightly", "--every", "1h", "--url", "https://example.com/")
	if code != 1 || !strings.Contains(errOut, "exists") || !strings.Contains(errOut, "409") {
		t.Fatalf("a repeated name: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = run("schedule", "create", "bad", "--cron", "0 3 * *", "--url", "https://example.com/")
	if code != 1 || !strings.Contains(errOut, "cron \"0 3 * *\"") || !strings.Contains(errOut, "400") {
		t.Fatalf("a bad cron: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("schedule", "create", "x", "--every", "1m"); code != exitUsage || !strings.Contains(errOut, "missing --job or --url") {
		t.Fatalf("no job: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run("schedule", "launch", "x"); code != exitUsage || !strings.Contains(errOut, `unknown action "launch"`) {
		t.Fatalf("unknown action: exit %d, %q", code, errOut)
	}
	if code, out, _ := run("schedule", "pause", "nightly"); code != 0 || !strings.Contains(out, "paused:    true") && !strings.Contains(out, "true") {
		t.Fatalf("pause: exit %d, %q", code, out)
	}
	code, out, _ = run("schedules")
	if code != 0 || !strings.Contains(out, "nightly") || !strings.Contains(out, "true") || !strings.HasPrefix(out, "NAME") {
		t.Fatalf("schedules: exit %d, %q", code, out)
	}
	if code, out, _ := run("schedule", "resume", "nightly", "-o", "json"); code != 0 || !strings.Contains(out, `"paused": false`) && !strings.Contains(out, `"paused":false`) {
		t.Fatalf("resume -o json: exit %d, %q", code, out)
	}
	if code, out, _ := run("schedule", "delete", "nightly"); code != 0 || !strings.Contains(out, "deleted schedule nightly") {
		t.Fatalf("delete: exit %d, %q", code, out)
	}
	if code, _, errOut := run("schedule", "show", "nightly"); code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("show a deleted schedule: exit %d, %q", code, errOut)
	}
	if list, err := p.client().Schedules(context.Background()); err != nil || len(list.Schedules) != 0 || slices.ContainsFunc(list.Schedules, func(s server.Schedule) bool { return s.Name == "bad" }) {
		t.Fatalf("schedules left: %+v %v", list, err)
	}
}
