//go:build linux

package runlog

import (
	"errors"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// wallTimer is a timer on the wall clock: a timerfd on CLOCK_REALTIME armed
// with an absolute time (TFD_TIMER_ABSTIME), so it fires when the wall clock
// reaches that time however the clock got there, a forward step included;
// and with TFD_TIMER_CANCEL_ON_SET, so any step of the clock (forward or
// back) also fires it at once and the dispatcher looks again. It costs no
// wake-up while it waits: nothing polls. The fd is read through the runtime's
// poller by one goroutine, which turns each expiry or step into a send on C.
type wallTimer struct {
	fd     int
	f      *os.File
	c      chan struct{}
	armed  bool
	broken atomic.Pointer[error] // set by the reader when the fd fails
	done   chan struct{}
}

// newWallTimer opens a wall-clock timer, or fails where the kernel (or a
// sandbox) refuses timerfds; the dispatcher then bounds its sleeps instead.
func newWallTimer() (*wallTimer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	// A non-blocking fd makes os.NewFile register it with the poller, so a
	// Read parks the goroutine (not a thread) and Close ends it.
	t := &wallTimer{fd: fd, f: os.NewFile(uintptr(fd), "timerfd"), c: make(chan struct{}, 1), done: make(chan struct{})}
	go t.read()
	return t, nil
}

// read forwards expiries and clock steps to C until the timer is closed.
func (t *wallTimer) read() {
	defer close(t.done)
	var buf [8]byte
	for {
		_, err := t.f.Read(buf[:])
		switch {
		case err == nil, errors.Is(err, unix.ECANCELED):
			// Expired, or the clock was set (ECANCELED): look again.
		case errors.Is(err, os.ErrClosed):
			return
		default:
			t.broken.Store(&err)
			t.notify()
			return
		}
		t.notify()
	}
}

func (t *wallTimer) notify() {
	select {
	case t.c <- struct{}{}:
	default:
	}
}

// C receives when the armed time is reached or the wall clock is set. A
// receive may be stale (from an earlier arming): it only costs a look.
func (t *wallTimer) C() <-chan struct{} { return t.c }

// arm sets the timer to fire at atMS (ms since the Unix epoch, wall clock),
// replacing any earlier setting. A time already past fires at once.
func (t *wallTimer) arm(atMS int64) error {
	if p := t.broken.Load(); p != nil {
		return *p
	}
	select { // drop a stale expiry: the caller is about to wait afresh
	case <-t.c:
	default:
	}
	ns := max(atMS, 1) * 1e6 // a zero value would disarm
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(ns)}
	if err := unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME|unix.TFD_TIMER_CANCEL_ON_SET, &spec, nil); err != nil {
		return os.NewSyscallError("timerfd_settime", err)
	}
	t.armed = true
	return nil
}

// disarm stops the timer if it is armed.
func (t *wallTimer) disarm() {
	if !t.armed {
		return
	}
	t.armed = false
	_ = unix.TimerfdSettime(t.fd, 0, &unix.ItimerSpec{}, nil)
}

// close releases the timer and waits for its reader to end.
func (t *wallTimer) close() {
	_ = t.f.Close()
	<-t.done
}
