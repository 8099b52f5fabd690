package runlog

import "github.com/runlog/runlog/internal/vfs"

// OpenFS is Open on the filesystem fsys, for tests that run the runner on
// an in-memory disk (vfs.Mem, e.g. one that fills up).
func OpenFS(dir string, cfg Config, fsys vfs.FS) (*Runner, error) { return openFS(dir, cfg, fsys) }
