// Package warm runs functions on goroutines kept for the next function, rather than on a
// goroutine started for each. A new goroutine starts with a small stack and copies it at every
// doubling, and what Agate runs per command or per fire (validating a body against its JSON
// Schema, a pgx batch, decoding a JobFired) grew it several times over each time:
// runtime.copystack was 6–13 % of a scheduler's CPU while a producer sent commands, and a
// tenth of a worker's in a burst (docs/performance-history.md). A warm goroutine keeps the
// stack it grew; it ends after the pool's idle time without work, or once the pool is closed,
// so an idle process holds none.
package warm

import (
	"sync"
	"time"
)

// Pool is a set of warm goroutines.
type Pool struct {
	work      chan call
	sem       chan struct{} // a token per goroutine; nil when the pool has no bound
	idle      time.Duration
	closed    chan struct{}
	closeOnce sync.Once
}

type call struct {
	f    func()
	done chan any // Run's: nil, or what f panicked with; nil for Go
}

// New returns a pool of at most size goroutines (0: no bound) that end after idle without work.
func New(size int, idle time.Duration) *Pool {
	p := &Pool{work: make(chan call), idle: idle, closed: make(chan struct{})}
	if size > 0 {
		p.sem = make(chan struct{}, size)
	}
	return p
}

// Run runs f on a warm goroutine and returns once f has: on an idle one, else on a new one
// while the pool has fewer than its size, else on the first one free. A panic in f panics the
// caller, as if it had run f itself.
func (p *Pool) Run(f func()) {
	c := call{f: f, done: make(chan any, 1)}
	p.start(c)
	if v := <-c.done; v != nil {
		panic(v)
	}
}

// Go runs f on a warm goroutine without waiting for it, as the go statement would: on an idle
// one, else on a new one while the pool has fewer than its size, else on the first one free.
func (p *Pool) Go(f func()) { p.start(call{f: f}) }

func (p *Pool) start(c call) {
	select {
	case p.work <- c:
		return
	default:
	}
	if p.sem == nil {
		go p.loop(c)
		return
	}
	select {
	case p.work <- c:
	case p.sem <- struct{}{}:
		go p.loop(c)
	}
}

// Close has the goroutines end once idle; a function given after still runs.
func (p *Pool) Close() { p.closeOnce.Do(func() { close(p.closed) }) }

func (p *Pool) loop(c call) {
	if p.sem != nil {
		defer func() { <-p.sem }()
	}
	idle := time.NewTimer(p.idle)
	defer idle.Stop()
	for {
		c.run()
		idle.Reset(p.idle)
		select {
		case c = <-p.work:
		case <-idle.C:
			return
		case <-p.closed:
			return
		}
	}
}

// run calls f; a panic goes back to Run's caller, or, for Go, ends the program as it would
// on a goroutine of its own.
func (c call) run() {
	if c.done == nil {
		c.f()
		return
	}
	defer func() { c.done <- recover() }()
	c.f()
}
