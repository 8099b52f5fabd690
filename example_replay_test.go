package runlog_test

import (
	"context"
	"fmt"
	"os"

	"github.com/runlog/runlog"
)

// A job carries metadata that its handler reads, and a finished job is
// re-sent by Replay as a new job linked to it.
func ExampleRunner_Replay() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, err := runlog.Open(dir, runlog.Config{Logger: quietLogger(), Handlers: map[string]runlog.Handler{
		"webhook": runlog.Handle(func(ctx context.Context, _ []byte) error {
			fmt.Println("delivering for", runlog.MetadataFrom(ctx)["tenant"])
			return nil
		}),
	}})
	if err != nil {
		panic(err)
	}
	defer r.Close(context.Background())
	ctx := context.Background()
	id, _ := r.Enqueue(ctx, "webhook", map[string]int{"order": 42}, runlog.WithMetadata(map[string]string{"tenant": "acme"}))
	r.Wait(ctx, id)

	again, _ := r.Replay(ctx, id)
	j, _ := r.Wait(ctx, again)
	fmt.Println(j.State, "replay of", j.ReplayOf == id)
	// Output:
	// delivering for acme
	// delivering for acme
	// succeeded replay of true
}
