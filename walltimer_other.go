//go:build !linux

package runlog

import "errors"

// wallTimer is the Linux timerfd wall-clock timer; elsewhere there is none
// and the dispatcher bounds its sleeps by stepBound instead.
type wallTimer struct{}

func newWallTimer() (*wallTimer, error) {
	return nil, errors.New("no wall-clock timer on this platform")
}

func (*wallTimer) C() <-chan struct{}   { return nil }
func (*wallTimer) arm(atMS int64) error { return errors.New("no wall-clock timer on this platform") }
func (*wallTimer) disarm()              {}
func (*wallTimer) close()               {}
