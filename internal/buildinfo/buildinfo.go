// Package buildinfo says which runlog a binary is: its module version, the
// VCS commit it was built from and the Go toolchain, read once from
// runtime/debug.ReadBuildInfo. `runlog version` prints it and the server
// exports it as the runlog_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Version, when set at link time (go build -ldflags "-X
// github.com/runlog/runlog/internal/buildinfo.Version=v1.2.3"), wins over the
// module version of the build info: a release built from a checkout (whose
// module version is "(devel)") still says its version.
var Version string

// Info identifies a build.
type Info struct {
	// Version is the module version ("v1.2.3" for go install ...@v1.2.3),
	// or "(devel)" for a build from a checkout without -ldflags.
	Version string `json:"version"`
	// Commit is the VCS revision, "unknown" when the build did not record
	// it (go run, -buildvcs=false, a build outside a checkout).
	Commit string `json:"commit"`
	// Time is the commit's time (RFC 3339), "" when unknown.
	Time string `json:"commit_time,omitempty"`
	// Modified reports uncommitted changes in the checkout at build time.
	Modified bool `json:"modified"`
	// Go is the toolchain version, e.g. "go1.26.8".
	Go string `json:"go"`
}

var (
	once sync.Once
	info Info
)

// Get returns the build's Info (computed once).
func Get() Info {
	once.Do(func() {
		bi, ok := debug.ReadBuildInfo()
		info = fromBuildInfo(bi, ok)
	})
	return info
}

// fromBuildInfo turns what ReadBuildInfo returned into an Info.
func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: "(devel)", Commit: "unknown", Go: runtime.Version()}
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Commit = s.Value
			case "vcs.time":
				in.Time = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if Version != "" {
		in.Version = Version
	}
	return in
}

// ShortCommit is the first 12 characters of the commit (or all of it).
func (in Info) ShortCommit() string {
	if len(in.Commit) > 12 {
		return in.Commit[:12]
	}
	return in.Commit
}
