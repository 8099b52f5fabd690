package kinds

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	name, path, err := ParseCommand("hook=" + script)
	if err != nil || name != "hook" || path != script {
		t.Fatalf("ParseCommand = %q, %q, %v", name, path, err)
	}
	if _, path, err := ParseCommand("sh=sh"); err != nil || !filepath.IsAbs(path) {
		t.Errorf("a name on PATH must resolve to an absolute path: %q, %v", path, err)
	}
	for _, spec := range []string{
		"", "hook", "=" + script, "hook=", "bad name=" + script, "../x=" + script,
		strings.Repeat("n", 65) + "=" + script, "hook=" + filepath.Join(dir, "missing"),
		"hook=" + dir, // a directory is not executable
	} {
		if _, _, err := ParseCommand(spec); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseCommand(%q) err = %v; want ErrInvalid", spec, err)
		}
	}
}

func TestExecRequestValidate(t *testing.T) {
	t.Parallel()
	cmds := map[string]string{"hook": "/bin/true"}
	for _, tc := range []struct {
		req  ExecRequest
		want error
	}{
		{ExecRequest{Command: "hook", Args: []string{"a", "b"}, Stdin: "x"}, nil},
		{ExecRequest{}, ErrInvalid},
		{ExecRequest{Command: "rm"}, ErrUnknownCommand},
		{ExecRequest{Command: "/bin/true"}, ErrUnknownCommand},
		{ExecRequest{Command: "hook", Args: []string{"a\x00b"}}, ErrInvalid},
	} {
		err := tc.req.Validate(cmds)
		if (tc.want == nil && err != nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("Validate(%+v) = %v; want %v", tc.req, err, tc.want)
		}
	}
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"under", []string{"ab", "cd"}, "abcd"},
		{"exact", []string{"abcdefgh"}, "abcdefgh"},
		{"spill", []string{"abcde", "fghij"}, "[2 earlier bytes dropped]\ncdefghij"},
		{"huge write", []string{"ab", "0123456789xyz"}, "[7 earlier bytes dropped]\n56789xyz"},
		{"many small", []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}, "[2 earlier bytes dropped]\ncdefghij"},
	} {
		tb := &tailBuffer{max: 8}
		total := 0
		for _, w := range tc.writes {
			n, err := tb.Write([]byte(w))
			if err != nil || n != len(w) {
				t.Fatalf("%s: Write = %d, %v", tc.name, n, err)
			}
			total += len(w)
		}
		if got := string(tb.Bytes()); got != tc.want {
			t.Errorf("%s: got %q; want %q", tc.name, got, tc.want)
		}
		kept := tb.buf
		if !bytes.HasSuffix([]byte(strings.Join(tc.writes, "")), kept) || int64(len(kept))+tb.dropped != int64(total) {
			t.Errorf("%s: kept %q and dropped %d of %d bytes", tc.name, kept, tb.dropped, total)
		}
	}
}
