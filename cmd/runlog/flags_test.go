package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("RUNLOG_DATA", "/srv/runlog")
	t.Setenv("RUNLOG_RETRY_BASE", "250ms")
	t.Setenv("RUNLOG_ALLOW_HOST", "a.example, b.example")
	t.Setenv("RUNLOG_MAX_BODY", "2MiB")
	t.Setenv("RUNLOG_ADDR", "127.0.0.1:9999")
	var f serveFlags
	fs := newFlagSet("serve", "", &bytes.Buffer{})
	f.register(fs)
	pos, err := parse(fs, []string{"--addr", "127.0.0.1:1234", "extra", "--concurrency", "8"})
	if err != nil {
		t.Fatal(err)
	}
	if f.data != "/srv/runlog" || f.retryBase != 250*time.Millisecond || f.maxBody != 2<<20 {
		t.Errorf("environment not applied: data %q, retry-base %v, max-body %d", f.data, f.retryBase, f.maxBody)
	}
	if f.addr != "127.0.0.1:1234" {
		t.Errorf("a command-line flag must win over the environment: addr %q", f.addr)
	}
	if strings.Join(f.allowHosts, "|") != "a.example|b.example" {
		t.Errorf("repeatable flag from a comma list: %q", f.allowHosts)
	}
	if f.concurrency != 8 || len(pos) != 1 || pos[0] != "extra" {
		t.Errorf("flags after a positional argument: concurrency %d, positional %q", f.concurrency, pos)
	}

	var local localString
	fs = newFlagSet("demo", "", &bytes.Buffer{})
	fs.Var(&local, "data", "")
	if _, err := parse(fs, nil); err != nil || local != "" {
		t.Errorf("runlog demo's --data must not read RUNLOG_DATA: %q, %v", local, err)
	}

	t.Setenv("RUNLOG_CONCURRENCY", "many")
	fs = newFlagSet("serve", "", &bytes.Buffer{})
	f = serveFlags{}
	f.register(fs)
	if _, err := parse(fs, nil); err == nil || !strings.Contains(err.Error(), "RUNLOG_CONCURRENCY") {
		t.Errorf("a bad environment value must be reported by name: %v", err)
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true}, {"1MiB", 1 << 20, true}, {"512KiB", 512 << 10, true}, {"1 GiB", 1 << 30, true},
		{"2MB", 2_000_000, true}, {"10B", 10, true}, {"", 0, false}, {"-1", 0, false}, {"1.5MiB", 0, false},
		{"lots", 0, false}, {"9999999GiB", 0, false},
	} {
		var b byteSize
		err := b.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && int64(b) != tc.want) {
			t.Errorf("Set(%q) = %d, %v; want %d, ok=%v", tc.in, b, err, tc.want, tc.ok)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := run(nil, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "serve") {
		t.Errorf("no command: exit %d", code)
	}
	errOut.Reset()
	if code := run([]string{"frobnicate"}, &out, &errOut); code != exitUsage || !strings.Contains(errOut.String(), "unknown command") {
		t.Errorf("unknown command: exit %d %q", code, errOut.String())
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errOut); code != exitOK || strings.Contains(out.String(), "loadtest") {
		t.Errorf("help: exit %d, lists hidden commands: %q", code, out.String())
	}
	if code := run([]string{"serve", "-h"}, &out, &errOut); code != exitOK {
		t.Errorf("serve -h: exit %d", code)
	}
	if code := run([]string{"serve", "--no-such-flag"}, &out, &errOut); code != exitUsage {
		t.Errorf("bad flag: exit %d", code)
	}
}
