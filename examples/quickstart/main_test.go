package main

import (
	"context"
	"strings"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/runlogtest"
)

func TestSendEmail(t *testing.T) {
	h := runlog.HandleTyped(sendEmail)
	res := runlogtest.Run(t.Context(), h, Email{To: "ada@example.com"}, runlog.AttemptInfo{JobID: 7, Attempt: 2})
	if res.Outcome != "success" || res.Output != "sent to ada@example.com as job 7, attempt 2" {
		t.Fatalf("%s: %v (output %q)", res.Outcome, res.Err, res.Output)
	}
	res = runlogtest.Run(t.Context(), h, Email{To: "nobody"}, runlog.AttemptInfo{})
	if res.Outcome != "permanent" {
		t.Fatalf("a bad address: %s, want permanent", res.Outcome)
	}
}

func TestWelcomeEnqueuesOnce(t *testing.T) {
	r := runlogtest.NewRunner(t, runlog.Config{Handlers: handlers()})
	ctx := t.Context()
	id, err := welcome(ctx, r.Runner, "ada@example.com")
	if err != nil {
		t.Fatal(err)
	}
	again, err := welcome(ctx, r.Runner, "ada@example.com")
	if err != nil || again != id {
		t.Fatalf("the second welcome: %d %v, want job %d", again, err, id)
	}
	r.RequireEnqueuedArgs(Email{To: "ada@example.com"}, runlog.Key("welcome-ada@example.com"), runlog.Target("smtp.example.com:587"))
	r.Drain()
	job, err := r.Job(ctx, id)
	if err != nil || job.State != runlog.StateSucceeded {
		t.Fatalf("job %+v %v", job, err)
	}
}

func TestRun(t *testing.T) {
	if err := run(context.Background(), t.TempDir(), "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), t.TempDir(), "nobody"); err == nil || !strings.Contains(err.Error(), "not an email address") {
		t.Fatalf("a bad address: %v", err)
	}
}
