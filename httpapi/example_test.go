package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/httpapi"
)

// The JSON API mounted under /runlog: a job of the application's kind is
// enqueued with its payload.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	handlers := map[string]runlog.Handler{}
	runlog.AddHandler(handlers, func(context.Context, Welcome) error { return nil })
	r, _ := runlog.Open(dir, runlog.Config{Handlers: handlers})
	defer r.Close(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/runlog/", httpapi.New(r, httpapi.Options{Token: "s3cret", BasePath: "/runlog"}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/runlog/v1/jobs", strings.NewReader(`{"kind":"welcome","payload":{"to":"ada@example.com"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer s3cret")
	res, _ := http.DefaultClient.Do(req)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("Location"), strings.TrimSpace(string(body)))

	j, _ := r.Wait(context.Background(), 1)
	fmt.Println(j.Kind, j.State, string(j.Payload))
	// Output:
	// 201 /runlog/v1/jobs/1 {"id":1,"existing":false}
	// welcome succeeded {"to":"ada@example.com"}
}
