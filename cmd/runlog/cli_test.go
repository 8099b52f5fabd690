package main

import (
	"context"
	"encoding/json"
	"maps"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog/internal/buildinfo"
	"github.com/runlog/runlog/internal/server"
	"github.com/runlog/runlog/internal/testwait"
)

// TestCLIUsageErrors checks that every usage error exits 64 and says why
// before the usage, without a server.
func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		reason string
	}{
		{[]string{"job"}, "runlog job: missing ID"},
		{[]string{"job", "x"}, `job id "x" is not a number`},
		{[]string{"job", "1", "2"}, `unexpected argument "2" after ID`},
		{[]string{"jobs", "extra"}, `unexpected argument "extra": this command takes flags only`},
		{[]string{"stats", "-o", "yaml"}, `"yaml": use table or json`},
		{[]string{"retry"}, "missing ID...: name the jobs to retry, or select them with a filter"},
		{[]string{"cancel", "1", "--state", "pending"}, "give job IDs or a filter"},
		{[]string{"retry", "--state", "pending", "--yes"}, `--state "pending": retry takes jobs in state failed or cancelled`},
		{[]string{"discard"}, "missing ID...: name the jobs to discard, or select them with a filter"},
		{[]string{"discard", "--state", "running", "--yes"}, `--state "running": discard takes jobs in state succeeded or failed or cancelled`},
		{[]string{"stats", "--server", "127.0.0.1:7070"}, `--server "127.0.0.1:7070" (or RUNLOG_SERVER) is not a URL`},
		{[]string{"journal"}, "runlog journal: missing the command"},
		{[]string{"journal", "verify"}, "runlog journal verify: missing DIR"},
		{[]string{"journal", "state", "a", "b"}, `unexpected argument "b" after DIR`},
		{[]string{"migrate"}, "missing --postgres URL"},
		{[]string{"version", "now"}, `unexpected argument "now"`},
		{[]string{"limit"}, "the subcommand is set"},
		{[]string{"limit", "set"}, "missing TARGET"},
		{[]string{"limit", "set", "http://t"}, "--rate is required"},
		{[]string{"limit", "set", "http://t", "--rate", "fast"}, `"fast" is not a number`},
		{[]string{"serve", "--rate-limit", "http://t"}, "want TARGET=RATE or TARGET=RATE/BURST"},
		{[]string{"serve", "--rate-limit", "http://t=5/0"}, `burst "0"`},
		{[]string{"serve", "--rate-limit-default", "0"}, `rate "0"`},
	} {
		code, out, errOut := runCLI(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.reason) || out != "" {
			t.Errorf("runlog %s: exit %d, stdout %q, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, out, errOut, exitUsage, tc.reason)
		}
	}
}

// TestCLIHelp checks the -h of the command groups: exit 0 and the right
// synopsis.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	if code, out, errOut := runCLI(t, nil, "journal", "-h"); code != 0 || !strings.Contains(out, "verify DIR") || !strings.Contains(out, "state DIR [--at SEQ]") {
		t.Errorf("journal -h: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut := runCLI(t, nil, "journal", "state", "-h")
	if code != 0 || !strings.Contains(errOut, "Usage: runlog journal state DIR [--at SEQ]") || !strings.Contains(errOut, "-at SEQ") || strings.Contains(errOut, "-at runlog") {
		t.Errorf("journal state -h: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "retry", "-h"); code != 0 || !strings.Contains(errOut, "-yes") || !strings.Contains(errOut, "-o format") {
		t.Errorf("retry -h: exit %d, %q", code, errOut)
	}
}

// TestCLIVersion checks runlog version and --version, as text and JSON.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		code, out, errOut := runCLI(t, nil, args...)
		if code != 0 || !regexp.MustCompile(`^runlog \S+ \(commit \S+.*, go1\.\d+`).MatchString(out) {
			t.Errorf("runlog %s: exit %d, %q %q", args[0], code, out, errOut)
		}
	}
	code, out, _ := runCLI(t, nil, "version", "-o", "json")
	var in buildinfo.Info
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || in.Version == "" || in.Commit == "" || !strings.HasPrefix(in.Go, "go1.") {
		t.Errorf("runlog version -o json: exit %d, %q", code, out)
	}
}

// TestCLIUnreachable checks the hint when no server answers.
func TestCLIUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, args := range [][]string{{"stats"}, {"jobs"}, {"job", "1"}, {"retry", "1", "2"}, {"enqueue", "--url", "http://x/"}} {
		code, out, errOut := runCLI(t, []string{"RUNLOG_SERVER=" + url}, args...)
		if code != exitFailure || out != "" || !strings.Contains(errOut, "cannot reach a runlog server at "+url) ||
			!strings.Contains(errOut, "--server") || !strings.Contains(errOut, "RUNLOG_SERVER") || strings.Contains(errOut, "dial tcp") {
			t.Errorf("runlog %s with no server: exit %d, %q %q", args[0], code, out, errOut)
		}
	}
}

// TestCLIToken checks the hints for a missing and for a wrong token.
func TestCLIToken(t *testing.T) {
	t.Parallel()
	p := startServe(t, t.TempDir(), "--token", "s3cret")
	env := []string{"RUNLOG_SERVER=" + p.url}
	code, _, errOut := runCLI(t, env, "stats")
	if code != exitFailure || !strings.Contains(errOut, "requires a token (HTTP 401): pass it with --token or RUNLOG_TOKEN") {
		t.Errorf("no token: exit %d, %q", code, errOut)
	}
	code, _, errOut = runCLI(t, append(env, "RUNLOG_TOKEN=wrong"), "stats")
	if code != exitFailure || !strings.Contains(errOut, "refused the token (HTTP 401)") || !strings.Contains(errOut, "RUNLOG_TOKEN") {
		t.Errorf("wrong token: exit %d, %q", code, errOut)
	}
	if code, out, errOut := runCLI(t, append(env, "RUNLOG_TOKEN=s3cret"), "stats"); code != 0 || !strings.Contains(out, "pending:") {
		t.Errorf("right token: exit %d, %q %q", code, out, errOut)
	}
}

// TestCLIAgainstServer drives every client command against a real server:
// -o json on each, the table default, one error prefix, paging hints that
// keep the filters, and retry and cancel of many jobs.
func TestCLIAgainstServer(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	p := startServe(t, t.TempDir())
	env := []string{"RUNLOG_SERVER=" + p.url}
	c := p.client()
	ctx := context.Background()

	// enqueue -o json, and the one-prefix error.
	code, out, errOut := runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--key", "k1", "-o", "json")
	var created server.Created
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil || created.ID == 0 || created.Existing {
		t.Fatalf("enqueue -o json: exit %d, %q %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, env, "enqueue", "--kind", "http")
	if code != exitFailure || errOut != "runlog enqueue: url is required (HTTP 400 Bad Request)\n" {
		t.Errorf("enqueue without a URL: exit %d, %q; want one prefix and the reason", code, errOut)
	}

	// Seven jobs fail for good (400), one waits an hour.
	var failed []uint64
	for i := range 7 {
		cr, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + "/bad", Key: "bad-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		failed = append(failed, cr.ID)
	}
	later, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + "/ok", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	testwait.UntilWithin(t, 60*time.Second, "the 7 jobs to fail and the first to succeed", func() (server.Stats, bool) {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Failed == 7 && s.Succeeded == 1
	})

	// -o json of the read commands.
	for _, tc := range []struct {
		args []string
		into any
		ok   func() bool
	}{
		{[]string{"stats"}, &server.Stats{}, nil},
		{[]string{"targets"}, &server.TargetList{}, nil},
		{[]string{"jobs", "--state", "failed"}, &server.JobList{}, nil},
		{[]string{"job", strconv.FormatUint(created.ID, 10)}, &server.Job{}, nil},
	} {
		code, out, errOut := runCLI(t, env, append(tc.args, "-o", "json")...)
		if code != 0 || json.Unmarshal([]byte(out), tc.into) != nil {
			t.Errorf("%s -o json: exit %d, %q %q", tc.args[0], code, out, errOut)
		}
		// --json is the same, and the table is the default.
		if code, out2, _ := runCLI(t, env, append(tc.args, "--json")...); code != 0 || out2 != out {
			t.Errorf("%s --json: exit %d, differs from -o json", tc.args[0], code)
		}
		if code, out, _ := runCLI(t, env, tc.args...); code != 0 || strings.HasPrefix(out, "{") {
			t.Errorf("%s: exit %d, %q; want a table", tc.args[0], code, out)
		}
	}
	code, out, _ = runCLI(t, env, "job", strconv.FormatUint(failed[0], 10))
	if code != 0 || !strings.Contains(out, "state:") || !strings.Contains(out, "failed") || !strings.Contains(out, "ATTEMPT") {
		t.Errorf("job as a table: exit %d, %q", code, out)
	}

	// Paging: the hint keeps the filters, the page size and the server,
	// and running it gives the next page.
	args := []string{"jobs", "--state", "failed", "--target", "", "--limit", "3", "--server", p.url}
	seen := map[string]bool{}
	for page := 0; ; page++ {
		code, out, errOut := runCLI(t, nil, args...)
		if code != 0 {
			t.Fatalf("page %d: exit %d, %q", page, code, errOut)
		}
		for _, m := range regexp.MustCompile(`(?m)^(\d+)\s+failed`).FindAllStringSubmatch(out, -1) {
			seen[m[1]] = true
		}
		hint := regexp.MustCompile(`(?m)^more: (.*)$`).FindStringSubmatch(out)
		if hint == nil {
			break
		}
		want := "runlog jobs --state failed --limit 3 --server " + p.url + " --after "
		if !strings.HasPrefix(hint[1], want) || page > 5 {
			t.Fatalf("page %d: hint %q; want %q and a cursor", page, hint[1], want)
		}
		args = strings.Fields(hint[1])[1:]
	}
	if len(seen) != 7 {
		t.Errorf("the pages listed %d failed jobs, want 7: %v", len(seen), seen)
	}

	// retry of a filter: the count without --yes (exit 64, nothing done),
	// a dry run, then the retry itself.
	code, out, errOut = runCLI(t, env, "retry", "--state", "failed")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "7 jobs match --state failed; nothing was done: add --yes") {
		t.Errorf("retry --state failed: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, env, "retry", "--state", "failed", "--dry-run", "-o", "json")
	var res bulkResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || !res.DryRun || res.Matched != 7 || len(res.Done) != 7 {
		t.Errorf("retry --dry-run -o json: exit %d, %q", code, out)
	}
	if s, _ := c.Stats(ctx); s.Failed != 7 {
		t.Fatalf("a retry without --yes changed jobs: %+v", s)
	}
	code, out, errOut = runCLI(t, env, "retry", "--state", "failed", "--yes", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.DryRun || res.Matched != 7 || len(res.Done) != 7 || len(res.Failed) != 0 {
		t.Errorf("retry --state failed --yes: exit %d, %q %q", code, out, errOut)
	}
	testwait.UntilWithin(t, 60*time.Second, "the retried jobs to fail again", func() (server.Stats, bool) {
		s, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Failed == 7 && s.Pending == 1
	})

	// retry of many ids: a finished job among them is refused (exit 1),
	// the others are retried.
	ids := []string{strconv.FormatUint(failed[0], 10), strconv.FormatUint(created.ID, 10), strconv.FormatUint(failed[1], 10)}
	code, out, errOut = runCLI(t, env, append([]string{"retry"}, ids...)...)
	if strings.Contains(errOut, "runlog: ") {
		t.Errorf("retry: the engine's prefix in %q", errOut)
	}
	if code != exitFailure || strings.Count(out, "job ") != 2 || !strings.Contains(errOut, "job "+ids[1]+": ") ||
		!strings.Contains(errOut, "(HTTP 409 Conflict)") || !strings.Contains(errOut, "retried 2 of 3 jobs; 1 refused") {
		t.Errorf("retry of 3 ids: exit %d, %q %q", code, out, errOut)
	}

	waitFailed := func(n int) {
		testwait.UntilWithin(t, 60*time.Second, "the retried jobs to fail again", func() (server.Stats, bool) {
			s, err := c.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s, s.Failed == n && s.Pending == 1
		})
	}
	waitFailed(7)

	// cancel of many ids (one already finished), then of a filter.
	code, out, errOut = runCLI(t, env, "cancel", strconv.FormatUint(later.ID, 10), ids[0], "--reason", "cleanup")
	if code != exitFailure || !strings.Contains(out, "job "+strconv.FormatUint(later.ID, 10)+" cancelled") || !strings.Contains(errOut, "cancelled 1 of 2 jobs; 1 refused") {
		t.Errorf("cancel of 2 ids: exit %d, %q %q", code, out, errOut)
	}
	var pendingIDs []uint64
	for range 3 {
		cr, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + "/ok", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		if err != nil {
			t.Fatal(err)
		}
		pendingIDs = append(pendingIDs, cr.ID)
	}
	code, out, errOut = runCLI(t, env, "cancel", "--kind", "http")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "3 jobs match --kind http; nothing was done: add --yes to cancel them") {
		t.Errorf("cancel --kind http: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "cancel", "--kind", "http", "--yes", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || len(res.Done) != 3 {
		t.Errorf("cancel --kind http --yes: exit %d, %q %q", code, out, errOut)
	}
	for _, id := range pendingIDs {
		if j, err := c.Job(ctx, id); err != nil || j.State != "cancelled" {
			t.Errorf("job %d after cancel --yes: %v %v", id, j.State, err)
		}
	}

	// --metadata key=value, repeatable; a malformed one is a usage error.
	code, out, errOut = runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--metadata", "tenant=acme", "--metadata", "note=a=b", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &created) != nil {
		t.Fatalf("enqueue --metadata: exit %d, %q %q", code, out, errOut)
	}
	if j, err := c.Job(ctx, created.ID); err != nil || !maps.Equal(j.Metadata, map[string]string{"tenant": "acme", "note": "a=b"}) {
		t.Errorf("enqueue --metadata: the job has metadata %v, %v", j.Metadata, err)
	}
	if code, _, errOut = runCLI(t, env, "enqueue", "--url", rec.srv.URL+"/ok", "--metadata", "tenant"); code != exitUsage || !strings.Contains(errOut, "want key=value") {
		t.Errorf("enqueue --metadata without '=': exit %d, %q; want a usage error", code, errOut)
	}

	// replay: by id (a new job linked to it), then by target with a dry run
	// first; mixing ids and a filter is a usage error.
	code, out, errOut = runCLI(t, env, "replay", strconv.FormatUint(created.ID, 10))
	if code != 0 || !strings.HasSuffix(strings.TrimSpace(out), "replay of "+strconv.FormatUint(created.ID, 10)) {
		t.Fatalf("replay ID: exit %d, %q %q", code, out, errOut)
	}
	tgt, err := c.Job(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, env, "replay", "--target", tgt.Target, "--since-ago", "1h", "--state", "failed", "--dry-run")
	if code != 0 || !strings.HasPrefix(out, "7 jobs would be re-sent") {
		t.Errorf("replay --dry-run: exit %d, %q %q; want the 7 failed jobs counted", code, out, errOut)
	}
	if code, _, errOut = runCLI(t, env, "replay", "1", "--target", "x"); code != exitUsage || !strings.Contains(errOut, "not both") {
		t.Errorf("replay with ids and a filter: exit %d, %q; want a usage error", code, errOut)
	}
	if code, _, errOut = runCLI(t, env, "replay"); code != exitUsage {
		t.Errorf("replay with nothing: exit %d, %q; want a usage error", code, errOut)
	}

	// discard: a pending job is refused with the reason (cancel it first),
	// a finished one goes (404 after); by filter: the count without --yes,
	// then the discard of the cancelled jobs only.
	pend, err := c.Enqueue(ctx, server.JobRequest{Kind: "http", URL: rec.srv.URL + "/ok", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runCLI(t, env, "discard", strconv.FormatUint(pend.ID, 10))
	if code != exitFailure || !strings.Contains(errOut, "cancel it first") || !strings.Contains(errOut, "(HTTP 409 Conflict)") {
		t.Errorf("discard of a pending job: exit %d, %q; want exit 1 saying to cancel it first", code, errOut)
	}
	code, out, errOut = runCLI(t, env, "discard", ids[0])
	if code != 0 || !strings.Contains(out, "job "+ids[0]+" discarded") {
		t.Errorf("discard ID: exit %d, %q %q", code, out, errOut)
	}
	if _, err := c.Job(ctx, failed[0]); err == nil {
		t.Errorf("job %d is still there after its discard", failed[0])
	}
	if code, _, errOut = runCLI(t, env, "discard", "--state", "pending", "--yes"); code != exitUsage || !strings.Contains(errOut, "discard takes jobs in state succeeded or failed or cancelled") {
		t.Errorf("discard --state pending: exit %d, %q; want a usage error", code, errOut)
	}
	code, out, errOut = runCLI(t, env, "discard", "--state", "cancelled")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "4 jobs match --state cancelled; nothing was done: add --yes to discard them") {
		t.Errorf("discard --state cancelled: exit %d, %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, env, "discard", "--state", "cancelled", "--yes", "-o", "json")
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 4 || len(res.Done) != 4 {
		t.Errorf("discard --state cancelled --yes: exit %d, %q %q", code, out, errOut)
	}
	if s, _ := c.Stats(ctx); s.Cancelled != 0 || s.Pending != 1 {
		t.Errorf("after the discard of the cancelled jobs: %+v; want none cancelled, the pending job kept", s)
	}
}
