package dashboard

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
)

// The vendored htmx (see docs/dashboard.md for its version and license),
// the stylesheet and the small script, and the page templates.
var (
	//go:embed static
	staticFS embed.FS
	//go:embed templates
	templateFS embed.FS
)

// assetVersion maps each static file to a hash of its content, so that
// asset URLs change with the content and can be cached for good.
var assetVersion = func() map[string]string {
	v := make(map[string]string)
	err := fs.WalkDir(staticFS, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := staticFS.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		v[strings.TrimPrefix(path, "static/")] = hex.EncodeToString(sum[:6])
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("dashboard: embedded assets: %v", err))
	}
	return v
}()

// asset returns the URL of a static file with its content version.
func asset(name string) (string, error) {
	v, ok := assetVersion[name]
	if !ok {
		return "", fmt.Errorf("dashboard: no static file %q", name)
	}
	return "/static/" + name + "?v=" + v, nil
}

// staticHandler serves the embedded assets; a request naming the current
// version may be cached for a year.
func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/static/")
		if v, ok := assetVersion[name]; ok && r.URL.Query().Get("v") == v {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "no-cache")
		}
		files.ServeHTTP(w, r)
	})
}

// pages holds one template set per page: the layout plus the page.
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"asset":    asset,
		"stamp":    stamp,
		"human":    human,
		"plural":   plural,
		"maxRetry": func() int { return MaxRetryMatching },
		// dict builds a map for a sub-template: dict "k1" v1 "k2" v2 ...
		"dict": func(kv ...any) (map[string]any, error) {
			if len(kv)%2 != 0 {
				return nil, fmt.Errorf("dict: %d arguments, want key-value pairs", len(kv))
			}
			m := make(map[string]any, len(kv)/2)
			for i := 0; i < len(kv); i += 2 {
				k, ok := kv[i].(string)
				if !ok {
					return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
				}
				m[k] = kv[i+1]
			}
			return m, nil
		},
		"short": func(s string, n int) string {
			if len(s) <= n {
				return s
			}
			return strings.ToValidUTF8(s[:n], "") + "…"
		},
		"jobURL": func(id uint64) string { return fmt.Sprintf("/jobs/%d", id) },
		"pct": func(a, b int) int {
			if b <= 0 {
				return 0
			}
			return a * 100 / b
		},
		"scheduleURL": scheduleURL,
		"queueURL":    queueURL,
	}
	out := make(map[string]*template.Template)
	for _, name := range []string{"overview", "jobs", "job", "targets", "schedules", "queues", "login", "logout", "error", "deferrals"} {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templateFS,
			"templates/layout.html", "templates/chart.html", "templates/"+name+".html"))
	}
	return out
}()
