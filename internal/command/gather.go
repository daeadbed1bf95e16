package command

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/agatesched/agate/internal/warm"
)

// Defaults of the gathering of commands into batches.
const (
	// BatchDefault is the most commands applied in one transaction. Each writes in a savepoint
	// (a subtransaction): PostgreSQL tracks up to 64 of them per transaction cheaply, more make
	// every other session's visibility checks slower while it runs.
	BatchDefault = 64
	// NewJobsBatchFactor times the batch size is the most new jobs gathered in one transaction:
	// they are stored by one statement in one savepoint (bulkSchedule).
	NewJobsBatchFactor = 4
	// GatherWaitDefault is how long the first command of a batch waits for others to join it.
	GatherWaitDefault = time.Millisecond
	// ConcurrentBatchesDefault is how many batch transactions one node runs at once.
	ConcurrentBatchesDefault = 2
)

// gatherer gathers the commands of concurrent callers — the command router's handlers and the
// api requests in flight — into batches, each applied in one transaction: a transaction and its
// commit per batch rather than per command.
//
// Commands are gathered by lock partition (that of the job they name; all partitions, or none
// for rejections), so that a batch locks one partition and batches of different partitions, on
// this node and others, run side by side instead of queueing for every partition. Commands that
// only insert new jobs (bulkCandidate: a producer scheduling work) lock no partition
// (Locks.NewJobs) and gather together, in batches of up to NewJobsBatchFactor × Batch.
//
// The first caller of a batch leads it: it waits GatherWait (or until the batch is full) and
// for one of the ConcurrentBatches slots, while later callers join, then applies the batch and
// hands every caller its outcome. Under load the slots are busy, so batches grow by themselves;
// a lone command waits GatherWait at most.
//
// Batches of new jobs run one at a time on a node (newJobs), besides taking a slot. They lock
// nothing another batch of them waits for, so two could run at once; but a transaction costs
// mostly per batch (its statements are planned at every execution, then the commit), and a
// producer with 64 requests in flight on two nodes then got batches of 11 and 3,900 commands/s;
// one at a time, batches of 15 and 4,300/s (on the durable subject 230 instead of 130; see
// docs/performance-history.md). The other slot keeps other commands from waiting behind them.
type gatherer struct {
	h       *Handler
	max     int
	wait    time.Duration
	slots   chan struct{}
	newJobs chan struct{}
	// appliers run the batches, one per slot.
	appliers *warm.Pool

	mu   sync.Mutex
	open map[int]*gathering // by batchKey
}

type gathering struct {
	items []*item
	seqs  []uint64
	full  chan struct{} // closed when the batch reached max
	done  chan struct{} // closed when the items have their outcomes
}

// Batch keys besides partition numbers.
const (
	keyAll     = -1 // commands that lock every partition, or the partitions of several jobs
	keyNoLock  = -2 // rejections: they lock nothing
	keyNewJobs = -3 // bulk candidates: Locks.NewJobs
)

// batchKey is the partition whose batch the item joins.
func (g *gatherer) batchKey(it *item) int {
	if !it.applies() {
		return keyNoLock
	}
	if _, ok := bulkCandidate(it); ok {
		return keyNewJobs
	}
	if it.cmdv.scope.all {
		return keyAll
	}
	key := keyNoLock
	for _, j := range it.cmdv.scope.jobs {
		p := g.h.cfg.Locks.PartitionOf(j.Group, j.Name)
		if key != keyNoLock && key != p {
			return keyAll
		}
		key = p
	}
	return key
}

func newGatherer(h *Handler) *gatherer {
	slots := cmp.Or(h.cfg.ConcurrentBatches, ConcurrentBatchesDefault)
	return &gatherer{h: h, max: cmp.Or(h.cfg.Batch, BatchDefault), wait: cmp.Or(h.cfg.GatherWait, GatherWaitDefault),
		slots: make(chan struct{}, slots), newJobs: make(chan struct{}, 1), appliers: warm.New(slots, warmIdle),
		open: map[int]*gathering{}}
}

// maxOf is the most commands of a batch of the key.
func (g *gatherer) maxOf(key int) int {
	if key == keyNewJobs {
		return NewJobsBatchFactor * g.max
	}
	return g.max
}

// do handles req in the next batch of its partition and returns its outcome. seq, when not
// zero, orders the commands of a batch (the stream sequence of a durable command, so a node
// applies them in stream order); ctx is the batch's when the caller leads it.
func (g *gatherer) do(ctx context.Context, req Request, seq uint64) Outcome {
	var it *item
	g.h.readers.Run(func() { it = g.h.prepare(ctx, req) })
	key := g.batchKey(it)
	g.mu.Lock()
	b := g.open[key]
	lead := b == nil
	if lead {
		b = &gathering{full: make(chan struct{}), done: make(chan struct{})}
		g.open[key] = b
	}
	b.items, b.seqs = append(b.items, it), append(b.seqs, seq)
	if len(b.items) == g.maxOf(key) {
		delete(g.open, key)
		close(b.full)
	}
	g.mu.Unlock()
	if lead {
		g.lead(ctx, key, b)
	}
	<-b.done
	return g.h.finish(it, len(b.items)) // no one joins a batch once it runs
}

func (g *gatherer) lead(ctx context.Context, key int, b *gathering) {
	defer func() {
		// Even when the batch panicked (the router's Recoverer then nacks the leader's message),
		// the other callers get an answer that makes their commands come round again.
		for _, it := range b.items {
			if it.out.Error == nil && !it.out.OK {
				it.out = Outcome{CommandID: it.id, Command: it.cmd, Error: &Error{Code: CodeInternal,
					Message: "the scheduler failed to apply the command (its log says why); the id is not remembered, so the command may be sent again"}}
			}
		}
		g.h.metrics.answered(ctx, b.items)
		close(b.done)
	}()
	t := time.NewTimer(g.wait)
	select {
	case <-b.full:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	if key == keyNewJobs {
		select {
		case g.newJobs <- struct{}{}:
			defer func() { <-g.newJobs }()
		case <-ctx.Done():
		}
	}
	slot := false
	select {
	case g.slots <- struct{}{}:
		slot = true
		defer func() { <-g.slots }()
	case <-ctx.Done(): // the batch fails at once: every command is answered transient
	}
	g.mu.Lock()
	if g.open[key] == b {
		delete(g.open, key)
	}
	items := slices.Clone(b.items)
	seqs := b.seqs
	g.mu.Unlock()
	// Commands of the stream in stream order; the order requests joined otherwise.
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return cmp.Compare(seqs[x], seqs[y]) })
	sorted := make([]*item, len(items))
	for k, i := range order {
		sorted[k] = items[i]
	}
	if !slot {
		g.h.run(ctx, sorted)
		return
	}
	// On a warm goroutine: the leader's own, fresh for its message, would grow its stack again
	// through pgx and the log at every batch. The slot held leaves one free.
	g.appliers.Run(func() { g.h.run(ctx, sorted) })
}
