package runlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestKeyMustBeValidUTF8 (issue 14, item 5): keys are stored through JSON,
// which turns invalid UTF-8 into U+FFFD, so "bin-\xff" and "bin-\xfe" would
// become one key and the second job would be lost as a duplicate. Enqueue
// refuses such a key, alone and in a batch, and stores nothing.
func TestKeyMustBeValidUTF8(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := openRunner(t, dir, runlog.Config{Handlers: map[string]runlog.Handler{"k": runlog.Handle(noop)}})
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	for _, key := range []string{"bin-\xff", "bin-\xfe", "\xed\xa0\x80"} {
		if _, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "k", Key: key, RunAt: later}); !errors.Is(err, runlog.ErrInvalid) {
			t.Fatalf("key %q: %v; want ErrInvalid", key, err)
		}
	}
	if _, err := r.EnqueueMany(ctx, []runlog.JobRequest{{Kind: "k", Key: "ok", RunAt: later}, {Kind: "k", Key: "bin-\xff", RunAt: later}}); !errors.Is(err, runlog.ErrInvalid) {
		t.Fatalf("batch with key %q: %v; want ErrInvalid", "bin-\xff", err)
	}
	// Valid keys that differ in their bytes stay distinct.
	a, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "k", Key: "bin-\u00ff", RunAt: later})
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.EnqueueJob(ctx, runlog.JobRequest{Kind: "k", Key: "bin-\u00fe", RunAt: later})
	if err != nil || b.Existing || b.ID == a.ID {
		t.Fatalf("distinct valid keys: %+v %+v %v", a, b, err)
	}
	st, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 2 {
		t.Fatalf("%d jobs pending; want the 2 with valid keys", st.Pending)
	}
}
