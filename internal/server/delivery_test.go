package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/testwait"
)

// TestJobShowsDeliveryLog: GET /v1/jobs/{id} gives each attempt of an http
// job its delivery log, and keeps output as before (status line, body).
func TestJobShowsDeliveryLog(t *testing.T) {
	t.Parallel()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Receiver", "yes")
		_, _ = w.Write([]byte("thanks"))
	}))
	defer recv.Close()
	srv, err := Start(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	c := &Client{BaseURL: srv.URL()}
	ctx := context.Background()
	created, err := c.Enqueue(ctx, JobRequest{Kind: "http", URL: recv.URL + "/x"})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the delivery", func() bool {
		j, err := c.Job(ctx, created.ID)
		return err == nil && j.State == runlog.StateSucceeded
	})
	resp, err := http.Get(srv.URL() + "/v1/jobs/" + strconv.FormatUint(created.ID, 10))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var j struct {
		History []struct {
			Output   string `json:"output"`
			Delivery *struct {
				Status     int               `json:"status"`
				DurationMS float64           `json:"duration_ms"`
				RemoteAddr string            `json:"remote_addr"`
				Headers    map[string]string `json:"headers"`
				Body       string            `json:"body"`
			} `json:"delivery"`
		} `json:"history"`
	}
	if err := json.Unmarshal(raw, &j); err != nil || len(j.History) != 1 || j.History[0].Delivery == nil {
		t.Fatalf("GET /v1/jobs/{id}: %v %s", err, raw)
	}
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	a := j.History[0]
	if d := a.Delivery; d.Status != 200 || d.DurationMS <= 0 || d.RemoteAddr != "127.0.0.1:"+port || d.Headers["X-Receiver"] != "yes" || d.Body != "thanks" || a.Output != "200 OK\nthanks" {
		t.Errorf("attempt %s", raw)
	}
}
