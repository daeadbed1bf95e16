package command

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"
)

// Defaults of the gathering of commands into batches.
const (
	// BatchDefault is the most commands applied in one transaction.
	BatchDefault = 256
	// GatherWaitDefault is how long the first command of a batch waits for others to join it.
	GatherWaitDefault = time.Millisecond
	// ConcurrentBatchesDefault is how many batch transactions one node runs at once.
	ConcurrentBatchesDefault = 2
)

// gatherer gathers the commands of concurrent callers — the command router's handlers and the
// api requests in flight — into batches applied by one HandleBatch each: a transaction and its
// commit per batch rather than per command.
//
// The first caller of a batch leads it: it waits GatherWait (or until the batch is full) and
// for one of the ConcurrentBatches slots, while later callers join, then applies the batch and
// hands every caller its outcome. Under load the slots are busy, so batches grow by themselves;
// a lone command waits GatherWait at most.
type gatherer struct {
	h     *Handler
	max   int
	wait  time.Duration
	slots chan struct{}

	mu   sync.Mutex
	open *gathering
}

type gathering struct {
	reqs []Request
	seqs []uint64
	outs []Outcome
	full chan struct{} // closed when the batch reached max
	done chan struct{} // closed when outs are set
}

func newGatherer(h *Handler) *gatherer {
	return &gatherer{h: h, max: cmp.Or(h.cfg.Batch, BatchDefault), wait: cmp.Or(h.cfg.GatherWait, GatherWaitDefault),
		slots: make(chan struct{}, cmp.Or(h.cfg.ConcurrentBatches, ConcurrentBatchesDefault))}
}

// do handles req in the next batch and returns its outcome. seq, when not zero, orders the
// commands of a batch (the stream sequence of a durable command, so a node applies them in
// stream order); ctx is the batch's when the caller leads it.
func (g *gatherer) do(ctx context.Context, req Request, seq uint64) Outcome {
	g.mu.Lock()
	b := g.open
	lead := b == nil
	if lead {
		b = &gathering{full: make(chan struct{}), done: make(chan struct{})}
		g.open = b
	}
	i := len(b.reqs)
	b.reqs, b.seqs = append(b.reqs, req), append(b.seqs, seq)
	if len(b.reqs) == g.max {
		g.open = nil
		close(b.full)
	}
	g.mu.Unlock()
	if lead {
		g.lead(ctx, b)
	}
	<-b.done
	return b.outs[i]
}

func (g *gatherer) lead(ctx context.Context, b *gathering) {
	defer func() {
		// Even when HandleBatch panicked (the router's Recoverer then nacks the leader's message),
		// the other callers get an answer that makes their commands come round again.
		if b.outs == nil {
			b.outs = make([]Outcome, len(b.reqs))
			for i, r := range b.reqs {
				b.outs[i] = Outcome{CommandID: commandID(r.Body), Command: r.Command, Error: &Error{Code: CodeInternal,
					Message: "the scheduler failed to apply the command (its log says why); the id is not remembered, so the command may be sent again"}}
			}
		}
		close(b.done)
	}()
	t := time.NewTimer(g.wait)
	select {
	case <-b.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	select {
	case g.slots <- struct{}{}:
		defer func() { <-g.slots }()
	case <-ctx.Done(): // HandleBatch fails at once: every command is answered transient
	}
	g.mu.Lock()
	if g.open == b {
		g.open = nil
	}
	g.mu.Unlock()
	// Commands of the stream in stream order; the order requests joined otherwise.
	order := make([]int, len(b.reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(b.seqs[x], b.seqs[y]) })
	reqs := make([]Request, len(order))
	for k, i := range order {
		reqs[k] = b.reqs[i]
	}
	outs := g.h.HandleBatch(ctx, reqs)
	res := make([]Outcome, len(outs))
	for k, i := range order {
		res[i] = outs[k]
	}
	b.outs = res
}
