package runlogtest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/runlogtest"
)

// sendWelcome is a handler under test: it refuses an empty address for
// good, and dedupes by job id and attempt.
func sendWelcome(ctx context.Context, w Welcome) error {
	if w.To == "" {
		return runlog.Permanent(errors.New("no address"))
	}
	a, _ := runlog.AttemptFrom(ctx)
	runlog.RecordOutput(ctx, fmt.Appendf(nil, "sent to %s (job %d, attempt %d)", w.To, a.JobID, a.Attempt))
	return nil
}

// A handler runs as one attempt would, and the result says what the
// runner would do with it.
func ExampleRun() {
	h := runlog.HandleTyped(sendWelcome)
	ctx := context.Background()
	res := runlogtest.Run(ctx, h, Welcome{To: "ada@example.com"}, runlog.AttemptInfo{JobID: 7, Attempt: 2})
	fmt.Println(res.Outcome, res.Output)
	res = runlogtest.Run(ctx, h, Welcome{}, runlog.AttemptInfo{})
	fmt.Println(res.Outcome, res.Err)
	// Output:
	// success sent to ada@example.com (job 7, attempt 2)
	// permanent no address
}

// Context makes the context an attempt's handler gets, to call the
// handler's function itself.
func ExampleContext() {
	ctx := runlogtest.Context(context.Background(), runlog.AttemptInfo{JobID: 9, Target: "smtp"})
	err := sendWelcome(ctx, Welcome{To: "bob@example.com"})
	fmt.Println(err, runlogtest.Output(ctx))
	// Output: <nil> sent to bob@example.com (job 9, attempt 1)
}
