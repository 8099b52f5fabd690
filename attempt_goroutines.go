package runlog

import "sync"

// attemptGoroutines runs attempts on goroutines kept from earlier
// attempts. A new goroutine starts with a small stack and copies it each
// time the handler's calls outgrow it (the http kind's net/http client
// takes it to 8 KiB): a few percent of a delivery's CPU, paid again by every
// attempt. A goroutine kept keeps the stack it grew (the garbage collector
// shrinks the stacks of those that stay idle). At most as many wait as
// attempts ran at once, which the pool bounds; release ends them. The zero
// value is ready for use.
type attemptGoroutines struct {
	once sync.Once
	work chan func()   // unbuffered: taken only by a goroutine that waits
	quit chan struct{} // closed by release
	stop sync.Once
}

func (g *attemptGoroutines) init() {
	g.once.Do(func() {
		g.work = make(chan func())
		g.quit = make(chan struct{})
	})
}

// run runs f on a goroutine that waits for work, or on a new one when none
// waits.
func (g *attemptGoroutines) run(f func()) {
	g.init()
	select {
	case g.work <- f:
	default:
		go g.loop(f)
	}
}

// loop runs f, then the work it is given, until release.
func (g *attemptGoroutines) loop(f func()) {
	for {
		f()
		select {
		case f = <-g.work:
		case <-g.quit:
			return
		}
	}
}

// release ends the goroutines that wait for work, and each that runs once
// its attempt returns; an attempt run after release runs on a goroutine of
// its own, which ends with it.
func (g *attemptGoroutines) release() {
	g.init()
	g.stop.Do(func() { close(g.quit) })
}
