// Package mount is how runlog serve gives the public dashboard package
// what only the server has: the limiter of wrong tokens it shares with its
// API and the recorder it feeds as the runner's Observer. Package
// dashboard sets the func in its init.
package mount

import (
	"github.com/runlog/runlog/internal/authlimit"
	idash "github.com/runlog/runlog/internal/dashboard"
)

// Dashboard returns opts (a dashboard.Options) with the server's limiter
// and recorder, which dashboard.New then uses. Set by package dashboard.
var Dashboard func(opts any, lim *authlimit.Limiter, rec *idash.Recorder) any
