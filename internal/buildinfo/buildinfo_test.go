package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	got := fromBuildInfo(bi, true)
	want := Info{Version: "v1.2.3", Commit: "0123456789abcdef0123", Time: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.99.1"}
	if got != want {
		t.Errorf("fromBuildInfo = %+v, want %+v", got, want)
	}
	if s := got.ShortCommit(); s != "0123456789ab" {
		t.Errorf("ShortCommit = %q", s)
	}
	if got := fromBuildInfo(nil, false); got.Version != "(devel)" || got.Commit != "unknown" || got.Go == "" {
		t.Errorf("no build info: %+v", got)
	}
}
