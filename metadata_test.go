package runlog_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/runlog/runlog"
)

// TestMetadataReachesHandlerAndJob checks that a job's metadata is given to
// its handler (AttemptInfo.Metadata, also to middleware) and shown by Job,
// that WithMetadata merges (a later entry wins), and that a job without
// metadata has none.
func TestMetadataReachesHandlerAndJob(t *testing.T) {
	t.Parallel()
	seen := make(chan map[string]string, 2)
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: map[string]runlog.Handler{
		"work": runlog.Handle(func(ctx context.Context, _ []byte) error {
			seen <- runlog.MetadataFrom(ctx)
			return nil
		}),
	}})
	ctx := context.Background()
	want := map[string]string{"tenant": "acme", "region": "eu-west.1", "empty": ""}
	id, err := r.Enqueue(ctx, "work", nil,
		runlog.WithMetadata(map[string]string{"tenant": "initech", "region": "eu-west.1"}),
		runlog.WithMetadata(map[string]string{"tenant": "acme", "empty": ""}))
	if err != nil {
		t.Fatal(err)
	}
	if j, err := r.Wait(ctx, id); err != nil || !maps.Equal(j.Metadata, want) {
		t.Fatalf("Wait = %v, %v; want metadata %v", j.Metadata, err, want)
	}
	if got := <-seen; !maps.Equal(got, want) {
		t.Fatalf("the handler saw metadata %v, want %v", got, want)
	}
	plain, err := r.Enqueue(ctx, "work", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := r.Wait(ctx, plain); err != nil || j.Metadata != nil {
		t.Fatalf("a job without metadata shows %v, %v", j.Metadata, err)
	}
	if got := <-seen; got != nil {
		t.Fatalf("the handler of a job without metadata saw %v", got)
	}
}

// TestMetadataRefused checks each bound of a job's metadata: the enqueue is
// refused with ErrInvalid and a message naming what to change, and nothing
// is added.
func TestMetadataRefused(t *testing.T) {
	t.Parallel()
	r := openRunner(t, t.TempDir(), runlog.Config{Handlers: map[string]runlog.Handler{
		"work": runlog.Handle(func(context.Context, []byte) error { return nil }),
	}})
	many := map[string]string{}
	for i := range runlog.MaxMetadataEntries + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name string
		md   map[string]string
		want string
	}{
		{"too many entries", many, "17 metadata entries, at most 16"},
		{"empty key", map[string]string{"": "v"}, "must be 1 to 64 bytes"},
		{"long key", map[string]string{strings.Repeat("k", 65): "v"}, "must be 1 to 64 bytes"},
		{"key with a space", map[string]string{"a b": "v"}, "use letters, digits"},
		{"key with a colon", map[string]string{"a:b": "v"}, "use letters, digits"},
		{"long value", map[string]string{"k": strings.Repeat("v", 1025)}, "at most 1024 bytes"},
		{"value not UTF-8", map[string]string{"k": "\xff"}, "valid UTF-8"},
	}
	for _, tt := range tests {
		_, err := r.Enqueue(context.Background(), "work", nil, runlog.WithMetadata(tt.md))
		if !errors.Is(err, runlog.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Enqueue = %v; want ErrInvalid saying %q", tt.name, err, tt.want)
		}
	}
	if st, err := r.Stats(context.Background()); err != nil || st.Pending+st.Running+st.Succeeded != 0 {
		t.Fatalf("refused enqueues added jobs: %+v, %v", st, err)
	}
}

// TestMetadataSurvivesReopen checks that metadata is journaled with the job
// and read back after a reopen (replay, and the snapshot) of the embedded
// store (the conformance suite checks both stores' reopen).
func TestMetadataSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := runlog.Config{Handlers: map[string]runlog.Handler{
		"later": runlog.Handle(func(context.Context, []byte) error { return nil }),
	}}
	r, err := runlog.Open(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	md := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	id, err := r.Enqueue(ctx, "later", nil, runlog.WithMetadata(md), runlog.RunIn(1e12))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	id2, err := r.Enqueue(ctx, "later", nil, runlog.WithMetadata(md), runlog.RunIn(1e12))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err = runlog.Open(dir, cfg); err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	for _, id := range []uint64{id, id2} {
		if j, err := r.Job(ctx, id); err != nil || !maps.Equal(j.Metadata, md) {
			t.Fatalf("job %d after a reopen: metadata %v, %v; want %v", id, j.Metadata, err, md)
		}
	}
}
