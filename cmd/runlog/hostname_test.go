package main

import (
	"bytes"
	"io"
	"log/slog"
	"slices"
	"testing"
)

// TestHostnameFlag (issue 14, item 1): --hostname is repeatable and also
// read from RUNLOG_HOSTNAME as a comma list; it becomes the server's
// Hostnames.
func TestHostnameFlag(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		env  string
		args []string
		want []string
	}{
		{"", []string{"--hostname", "jobs.example.com", "--hostname", "10.0.0.5"}, []string{"jobs.example.com", "10.0.0.5"}},
		{"a.example, b.example", nil, []string{"a.example", "b.example"}},
		{"a.example", []string{"--hostname", "c.example"}, []string{"c.example"}},
	} {
		t.Setenv("RUNLOG_HOSTNAME", c.env)
		var f serveFlags
		fs := newFlagSet("serve", "", &bytes.Buffer{})
		f.register(fs)
		if _, err := parse(fs, c.args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.config(log)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Hostnames, c.want) {
			t.Errorf("RUNLOG_HOSTNAME=%q %q: Hostnames %q; want %q", c.env, c.args, cfg.Hostnames, c.want)
		}
	}
}
