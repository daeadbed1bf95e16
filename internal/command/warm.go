package command

import (
	"time"
)

// warmIdle is how long a warm goroutine waits for work before it ends.
const warmIdle = time.Second

// warmPool runs functions for short-lived goroutines — a watermill handler or an api request
// each — on at most size long-lived goroutines of its own, which keep the stacks they grew.
// A fresh goroutine starts with a small stack and copies it at every doubling: reading a body
// (the JSON Schema validator recurses deeply) and applying a batch (pgx, the log) grew the
// caller's stack several times over at every command, 6–13 % of a scheduler's CPU while a
// producer sent commands (runtime.copystack in docs/performance-history.md). A warm goroutine
// ends after warmIdle without work, so an idle node holds none.
type warmPool struct {
	work chan warmCall
	sem  chan struct{} // a token per running goroutine
}

type warmCall struct {
	f    func()
	done chan any // nil, or what f panicked with
}

func newWarmPool(size int) *warmPool {
	return &warmPool{work: make(chan warmCall), sem: make(chan struct{}, max(size, 1))}
}

// run runs f on a warm goroutine: an idle one, a new one while there are fewer than size, else
// the first one free. A panic in f panics the caller, as if it had run f itself.
func (p *warmPool) run(f func()) {
	c := warmCall{f: f, done: make(chan any, 1)}
	select {
	case p.work <- c:
	default:
		select {
		case p.work <- c:
		case p.sem <- struct{}{}:
			go p.loop(c)
		}
	}
	if v := <-c.done; v != nil {
		panic(v)
	}
}

func (p *warmPool) loop(first warmCall) {
	defer func() { <-p.sem }()
	p.call(first)
	idle := time.NewTimer(warmIdle)
	defer idle.Stop()
	for {
		select {
		case c := <-p.work:
			p.call(c)
			idle.Reset(warmIdle)
		case <-idle.C:
			return
		}
	}
}

func (p *warmPool) call(c warmCall) {
	defer func() { c.done <- recover() }()
	c.f()
}
