package main

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeCPUProfile: --cpu-profile writes a CPU profile of the run (a
// gzipped profile.proto, as pprof reads it) once the server stops; a file that cannot be created stops
// the server at start with the flag's name.
func TestServeCPUProfile(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "cpu.prof")
	p := startServe(t, t.TempDir(), "--cpu-profile", name)
	if code := p.stop(t); code != 0 {
		t.Fatalf("exit %d on SIGTERM\n%s", code, p.output())
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzipped: %v", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(b), "nanoseconds") {
		t.Errorf("the profile (%d bytes, %v) names no CPU sample unit", len(b), err)
	}

	code, _, errOut := runCLI(t, nil, "serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0", "--cpu-profile", filepath.Join(t.TempDir(), "missing", "cpu.prof"))
	if code != exitUsage || !strings.Contains(errOut, "--cpu-profile") {
		t.Errorf("an uncreatable profile: exit %d, %q; want %d naming --cpu-profile", code, errOut, exitUsage)
	}
}
