package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/runlog/runlog"
	"github.com/runlog/runlog/dashboard"
)

// The dashboard mounted in an application's mux under /admin/jobs, next
// to the application's own routes.
func ExampleNew() {
	dir, _ := os.MkdirTemp("", "runlog-example")
	defer os.RemoveAll(dir)
	r, _ := runlog.Open(dir, runlog.Config{Handlers: map[string]runlog.Handler{
		"email": runlog.Handle(func(context.Context, []byte) error { return nil }),
	}})
	defer r.Close(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/admin/jobs/", dashboard.New(r, dashboard.Options{Token: "s3cret", BasePath: "/admin/jobs"}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Without a session, a page sends the browser to the login page, under the base.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, _ := client.Get(srv.URL + "/admin/jobs/failed")
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("Location"))
	// Output: 303 /admin/jobs/login?next=%2Ffailed
}
