package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit checks packaging/runlog.service with systemd-analyze
// verify (every directive known and valid, the binary there), pointing
// ExecStart at the binary the tests build; and that the check would see a
// bad directive.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "packaging", "runlog.service"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(unit)
	for _, want := range []string{"ExecStart=/usr/local/bin/runlog serve --token-file=${CREDENTIALS_DIRECTORY}/token", "DynamicUser=yes",
		"StateDirectory=runlog", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "CapabilityBoundingSet=\n",
		"RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "SystemCallFilter=@system-service", "Restart=on-failure"} {
		if !strings.Contains(text, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	verify := func(name, text string) string {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "/usr/local/bin/runlog", binary(t))), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(tool, "verify", path)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			out.WriteString("exit: " + err.Error())
		}
		return out.String()
	}
	if out := verify("runlog.service", text); out != "" {
		t.Errorf("systemd-analyze verify packaging/runlog.service:\n%s", out)
	}
	if out := verify("runlog.service", strings.Replace(text, "ProtectSystem=strict", "ProtectSystem=sideways", 1)); !strings.Contains(out, "protect system") {
		t.Errorf("a bad ProtectSystem went unnoticed: %q", out)
	}
}
