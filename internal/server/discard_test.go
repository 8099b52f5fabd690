package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/runlog/runlog"
)

// TestDiscardAPI: DELETE /v1/jobs/{id} removes a finished job (204, then
// 404), refuses a pending one with a 409 that says to cancel it first, and
// POST /v1/discard counts with dry_run, then discards the jobs of its
// filter only.
func TestDiscardAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, APIConfig{})
	ctx := context.Background()
	var failed []uint64
	for range 3 {
		j, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/bad", Key: "k-" + time.Now().Format(time.RFC3339Nano)})
		if err != nil {
			t.Fatal(err)
		}
		failed = append(failed, j.ID)
	}
	pending, err := b.client.Enqueue(ctx, JobRequest{Kind: "http", URL: b.target.URL + "/", RunAt: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range failed {
		b.waitState(t, id, runlog.StateFailed)
	}
	var apiErr *APIError
	err = b.client.Discard(ctx, pending.ID)
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !strings.Contains(apiErr.Message, "cancel it first") || strings.Contains(apiErr.Message, "not finished:") {
		t.Fatalf("DELETE of a pending job: %v; want a 409 saying to cancel it first, without the sentinel's prefix", err)
	}
	if err := b.client.Discard(ctx, failed[0]); err != nil {
		t.Fatal(err)
	}
	if err := b.client.Discard(ctx, failed[0]); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("a second DELETE: %v, want 404", err)
	}
	res, err := b.client.DiscardMatching(ctx, DiscardRequest{State: "failed", DryRun: true})
	if err != nil || res.Count != 2 {
		t.Fatalf("dry run: %+v, %v; want a count of 2", res, err)
	}
	if _, err := b.client.DiscardMatching(ctx, DiscardRequest{}); !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest {
		t.Fatalf("POST /v1/discard without a filter: %v, want 400", err)
	}
	res, err = b.client.DiscardMatching(ctx, DiscardRequest{State: "failed"})
	if err != nil || res.Count != 2 {
		t.Fatalf("discard: %+v, %v; want 2", res, err)
	}
	for _, id := range failed {
		if _, err := b.client.Job(ctx, id); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
			t.Fatalf("job %d after the discard: %v, want 404", id, err)
		}
	}
	if _, err := b.client.Job(ctx, pending.ID); err != nil {
		t.Fatalf("the pending job is gone: %v", err)
	}
}
