package dashboard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/internal/kinds"
)

// TestJobPageShowsDeliveryLog: an http job's page shows each attempt's
// status, duration, remote address, response headers and body.
func TestJobPageShowsDeliveryLog(t *testing.T) {
	t.Parallel()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Receiver-Trace", "trace-42")
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("queued <for later>"))
	}))
	defer recv.Close()
	b := setup(t, Options{})
	id, err := b.runner.Enqueue(context.Background(), kinds.KindHTTP, kinds.HTTPRequest{URL: recv.URL + "/hook", Body: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	b.waitState(id, runlog.StateSucceeded)
	resp, body := b.get("/jobs/" + strconv.FormatUint(id, 10))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("job page: %d", resp.StatusCode)
	}
	_, port, _ := net.SplitHostPort(recv.Listener.Addr().String())
	for _, want := range []string{
		`<dd class="delivery-status">202 Accepted</dd>`,
		`<dd class="delivery-remote">127.0.0.1:` + port + `</dd>`,
		`class="delivery-duration">`,
		`X-Receiver-Trace: trace-42`,
		`queued &lt;for later&gt;`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the job page lacks %q", want)
		}
	}
	if strings.Contains(body, "runlog_delivery") {
		t.Error("the job page shows the raw delivery document")
	}
}
