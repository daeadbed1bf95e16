package command

import (
	"context"
	"runtime"
	"time"
)

// readerIdle is how long a reader waits for work before it ends.
const readerIdle = time.Second

// readers run Handler.prepare — a body's JSON syntax, schema and decoding — for the goroutines
// that receive commands (a watermill handler or an api request each, short-lived), on at most
// GOMAXPROCS long-lived goroutines of their own. The JSON Schema validator recurses deeply, so
// reading a body grows a goroutine's stack several times over, and a fresh goroutine paid for
// that growth, copying its stack, at every command: 6–13 % of a scheduler's CPU while a
// producer sent commands (runtime.copystack in docs/performance.md). A reader keeps its grown
// stack; it ends after readerIdle without work, so an idle node holds none.
type readers struct {
	h    *Handler
	work chan readRequest
	sem  chan struct{} // a token per running reader
}

type readRequest struct {
	ctx context.Context
	req Request
	out chan readResult
}

type readResult struct {
	it    *item
	panic any // prepare panicked: the caller panics with it, as if it had run prepare itself
}

func newReaders(h *Handler) *readers {
	return &readers{h: h, work: make(chan readRequest), sem: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// read returns h.prepare(ctx, req), run by a reader: an idle one, a new one when there are
// fewer than GOMAXPROCS, else the first one free.
func (r *readers) read(ctx context.Context, req Request) *item {
	rr := readRequest{ctx: ctx, req: req, out: make(chan readResult, 1)}
	select {
	case r.work <- rr:
	default:
		select {
		case r.work <- rr:
		case r.sem <- struct{}{}:
			go r.run(rr)
		}
	}
	res := <-rr.out
	if res.panic != nil {
		panic(res.panic)
	}
	return res.it
}

func (r *readers) run(first readRequest) {
	defer func() { <-r.sem }()
	r.do(first)
	idle := time.NewTimer(readerIdle)
	defer idle.Stop()
	for {
		select {
		case rr := <-r.work:
			r.do(rr)
			idle.Reset(readerIdle)
		case <-idle.C:
			return
		}
	}
}

func (r *readers) do(rr readRequest) {
	defer func() {
		if p := recover(); p != nil {
			rr.out <- readResult{panic: p}
		}
	}()
	rr.out <- readResult{it: r.h.prepare(rr.ctx, rr.req)}
}
