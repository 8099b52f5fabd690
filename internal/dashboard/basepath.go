package dashboard

import (
	"net/http"
	"net/url"
	"strings"
)

// A dashboard mounted under a base path (Options.BasePath) works inside
// as if it were at "/": ServeHTTP strips the base from the request's path,
// and adds it back to what leaves: the pages' absolute links (href, src,
// action and the htmx attributes, which the templates write as "/..."),
// the Location and HX-Redirect headers, and the cookies' Path.

// stripBase returns r with base cut from the front of its path, or false
// when the path is not under base.
func stripBase(r *http.Request, base string) (*http.Request, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, base)
	if !ok || (rest != "" && rest[0] != '/') {
		return r, false
	}
	if rest == "" {
		rest = "/"
	}
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	r2.URL.Path = rest
	if r.URL.RawPath != "" {
		raw, ok := strings.CutPrefix(r.URL.RawPath, base)
		if !ok {
			return r, false
		}
		r2.URL.RawPath = raw
	}
	return r2, true
}

// basePathLinks rewrites the absolute links of a page under base.
func basePathLinks(base string) *strings.Replacer {
	var pairs []string
	for _, attr := range []string{"href", "src", "action", "hx-get", "hx-post"} {
		pairs = append(pairs, attr+`="/`, attr+`="`+base+`/`)
	}
	return strings.NewReplacer(pairs...)
}

// baseWriter puts base in front of the local paths of the Location and
// HX-Redirect headers and of the cookies' Path, as the answer's header is
// written.
type baseWriter struct {
	http.ResponseWriter
	base  string
	wrote bool
}

func (w *baseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		h := w.Header()
		for _, name := range []string{"Location", "HX-Redirect"} {
			if v := h.Get(name); strings.HasPrefix(v, "/") && !strings.HasPrefix(v, "//") {
				h.Set(name, w.base+v)
			}
		}
		if cookies := h.Values("Set-Cookie"); len(cookies) > 0 {
			for i, c := range cookies {
				cookies[i] = strings.Replace(c, "; Path=/", "; Path="+w.base, 1) // every cookie here has Path=/
			}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *baseWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *baseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
