// Command quickstart is a program written from runlog's README alone: a
// typed job, enqueued, run, and waited for.
//
//	go run . -dir ./jobs -to ada@example.com
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/runlog/runlog"
)

// Email is the payload of the "email" jobs: its type names its kind.
type Email struct {
	To string `json:"to"`
}

// Kind names the jobs that carry an Email.
func (Email) Kind() string { return "email" }

// sendEmail is the handler of the email jobs. It "sends" by recording a
// line in the attempt's output; an address without "@" can never be sent
// to, so it fails the job for good instead of retrying.
func sendEmail(ctx context.Context, e Email) error {
	if !strings.Contains(e.To, "@") {
		return runlog.Permanent(fmt.Errorf("%q is not an email address", e.To))
	}
	info, _ := runlog.AttemptFrom(ctx) // job id + attempt number, to deduplicate downstream
	runlog.RecordOutput(ctx, fmt.Appendf(nil, "sent to %s as job %d, attempt %d", e.To, info.JobID, info.Attempt))
	return nil
}

// welcome enqueues the welcome email of a new user, once per address.
func welcome(ctx context.Context, r *runlog.Runner, to string) (uint64, error) {
	return r.EnqueueArgs(ctx, Email{To: to}, runlog.Key("welcome-"+to), runlog.Target("smtp.example.com:587"))
}

// handlers are the program's handlers.
func handlers() map[string]runlog.Handler {
	hs := map[string]runlog.Handler{}
	runlog.AddHandler(hs, sendEmail)
	return hs
}

func run(ctx context.Context, dir, to string) error {
	r, err := runlog.Open(dir, runlog.Config{Concurrency: 8, Handlers: handlers()})
	if err != nil {
		return err
	}
	defer r.Close(ctx)
	id, err := welcome(ctx, r, to)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	job, err := r.Wait(wctx, id)
	if err != nil {
		return err
	}
	fmt.Printf("job %d: %s after %d attempt(s)\n", job.ID, job.State, job.Attempts)
	if job.State != runlog.StateSucceeded {
		return errors.New(job.Reason)
	}
	fmt.Println(job.History[len(job.History)-1].Output)
	return nil
}

func main() {
	dir := flag.String("dir", "./jobs", "the journal directory")
	to := flag.String("to", "ada@example.com", "the address to welcome")
	flag.Parse()
	if err := run(context.Background(), *dir, *to); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}
