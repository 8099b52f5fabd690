package dashboard

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestPrettyPayload(t *testing.T) {
	t.Parallel()
	big := `{"s":"` + strings.Repeat("x", maxShownPayload) + `"}`
	tests := []struct {
		name, in  string
		text      string // prefix of the text
		note      string // prefix of the note
		maxLength int
	}{
		{"empty", "", "", "empty", 0},
		{"json object", `{"a":1,"b":[true,null]}`, "{\n  \"a\": 1,\n  \"b\": [\n    true,", "JSON", 0},
		{"json string", `"hi"`, `"hi"`, "JSON", 0},
		{"text", "resize img-42.png", "resize img-42.png", "text", 0},
		{"almost json", `{"a":`, `{"a":`, "text", 0},
		{"binary", "\xff\x00\x01", "00000000  ff 00 01", "binary, 3 bytes as hex", 0},
		{"large json", big, "{\n  \"s\": \"xxx", "JSON, first 65536 of", maxShownPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, note := prettyPayload([]byte(tt.in))
			if !strings.HasPrefix(text, tt.text) {
				t.Errorf("text %q, want prefix %q", text[:min(len(text), 80)], tt.text)
			}
			if !strings.HasPrefix(note, tt.note) {
				t.Errorf("note %q, want prefix %q", note, tt.note)
			}
			if tt.maxLength > 0 && len(text) > tt.maxLength {
				t.Errorf("text of %d bytes, want at most %d", len(text), tt.maxLength)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query   string
		want    filter
		wantErr string
	}{
		{"", filter{}, ""},
		{"state=failed&kind=http&target=t&q=order", filter{State: "failed", Kind: "http", Target: "t", Q: "order"}, ""},
		{"order=oldest&after=42", filter{Oldest: true, After: 42}, ""},
		{"order=newest", filter{}, ""},
		{"state=dead", filter{}, "unknown state"},
		{"order=up", filter{}, "unknown order"},
		{"after=-3", filter{}, "not a page cursor"},
		{"q=" + strings.Repeat("x", maxFilterLen+1), filter{}, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			got, err := parseFilter(q)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			// The query a filter writes reads back as the same filter.
			back, err := url.ParseQuery(got.query(got.After))
			if err != nil {
				t.Fatal(err)
			}
			if again, err := parseFilter(back); err != nil || again != got {
				t.Errorf("round trip: %+v, %v", again, err)
			}
		})
	}
}

func TestLocalPath(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		"":                      "/",
		"/failed?kind=http":     "/failed?kind=http",
		"/jobs/7":               "/jobs/7",
		"//evil.example/x":      "/",
		"/\\evil.example":       "/",
		"https://evil.example/": "/",
		"javascript:alert(1)":   "/",
		"jobs":                  "/",
		"/%zz":                  "/",
	}
	for in, want := range tests {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLocalPath checks that no input makes a redirect leave the dashboard:
// the result is a path on this host, which a browser resolves to this host.
func FuzzLocalPath(f *testing.F) {
	for _, s := range []string{"/", "/jobs?x=1", "//evil", "/\\evil", "http://evil/", "/a/../b", "/\t/evil", "/%2F/evil"} {
		f.Add(s)
	}
	base, _ := url.Parse("http://dashboard.test/jobs/1")
	f.Fuzz(func(t *testing.T, in string) {
		out := localPath(in)
		if out != "/" && out != in {
			t.Fatalf("localPath(%q) = %q: neither the input nor /", in, out)
		}
		u, err := url.Parse(out)
		if err != nil {
			t.Fatalf("localPath(%q) = %q does not parse: %v", in, out, err)
		}
		if r := base.ResolveReference(u); r.Host != base.Host || r.Scheme != base.Scheme {
			t.Fatalf("localPath(%q) = %q resolves to %s", in, out, r)
		}
		// Browsers drop tabs and newlines and read "\" as "/" in URLs.
		clean := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(out)
		if strings.HasPrefix(clean, "//") {
			t.Fatalf("localPath(%q) = %q, which a browser reads as another host", in, out)
		}
	})
}

func TestChart(t *testing.T) {
	t.Parallel()
	series := []Minute{{Start: start}, {Start: start.Add(time.Minute), Succeeded: 3, Retryable: 1}, {Start: start.Add(2 * time.Minute), Succeeded: 1, Unsafe: 1}}
	c := newChart(series, 30, 40)
	if c.Max != 4 || len(c.Bars) != 3 {
		t.Fatalf("max %d, %d bars", c.Max, len(c.Bars))
	}
	b := c.Bars[1]
	if b.X != 10 || b.SH != 30 || b.FH != 10 || b.SY != 10 || b.FY != 0 {
		t.Errorf("bar 1 %+v: want succeeded 30 high from y 10, failed 10 high from y 0", b)
	}
	if c.Bars[0].SH != 0 || c.Bars[0].FH != 0 {
		t.Errorf("empty minute has height: %+v", c.Bars[0])
	}
	if !strings.Contains(c.Bars[2].Title, "1 succeeded, 1 failed (0 retryable, 0 permanent, 1 unsafe)") {
		t.Errorf("title %q", c.Bars[2].Title)
	}
	if e := newChart(make([]Minute, 60), 600, 100); e.Max != 0 || e.Bars[0].SH != 0 {
		t.Errorf("an idle hour draws bars: %+v", e.Bars[0])
	}
	hc := newHourChart(series, 30, 40)
	if hc.HourSucceeded != 4 || hc.HourFailed != 2 {
		t.Errorf("totals %d/%d, want 4/2", hc.HourSucceeded, hc.HourFailed)
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	tests := map[time.Duration]string{
		850 * time.Millisecond:                "850ms",
		12*time.Second + 340*time.Millisecond: "12.3s",
		3*time.Minute + 20*time.Second:        "3m20s",
		2*time.Hour + 5*time.Minute:           "2h5m",
		3*24*time.Hour + 4*time.Hour:          "3d4h",
	}
	for d, want := range tests {
		if got := human(d); got != want {
			t.Errorf("human(%v) = %q, want %q", d, got, want)
		}
	}
	d := pageData{Now: start}
	if got := d.Rel(start.Add(3 * time.Second)); got != "in 3s" {
		t.Errorf("Rel(+3s) = %q", got)
	}
	if got := d.Rel(start.Add(-5 * time.Minute)); got != "5m0s ago" {
		t.Errorf("Rel(-5m) = %q", got)
	}
	if got := d.Rel(time.Time{}); got != "" {
		t.Errorf("Rel(zero) = %q", got)
	}
}
