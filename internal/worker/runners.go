package worker

import "time"

// runnerIdle is how long a runner waits for its next function before it ends.
const runnerIdle = 10 * time.Second

// runners runs functions on goroutines kept for the next one, rather than on a goroutine started
// for each: a new goroutine's stack grew again for every message and every fire of a batch it
// ran (decoding a JobFired takes more stack than a goroutine starts with), a tenth of a worker's
// CPU in a burst. A runner ends after runnerIdle without work, or once done is closed.
type runners struct {
	tasks chan func()
	done  <-chan struct{}
}

func newRunners(done <-chan struct{}) *runners {
	return &runners{tasks: make(chan func()), done: done}
}

// Go runs f on an idle runner, or on a new one when none is idle.
func (r *runners) Go(f func()) {
	select {
	case r.tasks <- f:
	default:
		go r.run(f)
	}
}

func (r *runners) run(f func()) {
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		f()
		idle.Reset(runnerIdle)
		select {
		case f = <-r.tasks:
		case <-idle.C:
			return
		case <-r.done:
			return
		}
	}
}
