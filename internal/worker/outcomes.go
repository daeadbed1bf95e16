package worker

import (
	"context"
	"sync"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/events"
)

// OutcomeBatchDefault is Config.OutcomeBatch's default.
const OutcomeBatchDefault = 100

// outcomes publishes the outcomes of a worker's jobs. One round of messages is in flight at a
// time (a message per subject, more for many or large outcomes); the outcomes that finish while
// it waits for JetStream's acknowledgements go together in the next round, a message holding
// several (events.BatchMessage), up to Config.OutcomeBatch and the server's largest message.
// An outcome that finds nothing in flight goes at once, as a message of its own. With batches,
// 2-node bursts of 20,000 one-shots ran 20–40 % faster end to end, on 14–27 % less CPU a fire:
// the bus's costs are per message more than per byte (docs/performance-history.md).
type outcomes struct {
	w   *Worker
	max int // outcomes in one message at most

	mu      sync.Mutex
	queue   []queued
	sending bool // a goroutine sends the queue
}

// queued is an outcome waiting to be published; done receives the publish's error, once.
type queued struct {
	ev   events.Event
	done chan error
}

// publish publishes ev, with the outcomes that wait with it, and returns once JetStream stored
// it or the publish failed (deliver retries for a while). A job whose context ends stops
// waiting; its outcome may still be stored, which the schedulers record once (an execution
// ends once).
func (o *outcomes) publish(ctx context.Context, ev events.Event) error {
	q := queued{ev: ev, done: make(chan error, 1)}
	o.mu.Lock()
	o.queue = append(o.queue, q)
	start := !o.sending
	o.sending = true
	o.mu.Unlock()
	if start {
		go o.send(context.WithoutCancel(ctx))
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// send publishes what the queue holds, again and again until it is empty. A batch is published
// as it was formed each time deliver tries it again, under the same Nats-Msg-Id, so that
// JetStream drops a copy.
func (o *outcomes) send(ctx context.Context) {
	for {
		o.mu.Lock()
		qs := o.queue
		o.queue = nil
		if len(qs) == 0 {
			o.sending = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		var wg sync.WaitGroup
		for _, b := range events.Batches(qs, func(q queued) events.Event { return q.ev }, o.max, events.BatchLimit(o.w.js.Conn())) {
			wg.Go(func() {
				msg, err := o.message(b)
				if err == nil {
					err = o.w.deliver(ctx, msg)
				}
				if err == nil && o.w.afterStore != nil {
					o.w.afterStore(len(b))
				}
				for _, q := range b {
					q.done <- err
				}
			})
		}
		wg.Wait()
	}
}

// message is the NATS message of a batch: an outcome alone is a message of its own.
func (o *outcomes) message(b []queued) (*nats.Msg, error) {
	if len(b) == 1 {
		return events.Message(b[0].ev)
	}
	evs := make([]events.Event, len(b))
	for i, q := range b {
		evs[i] = q.ev
	}
	return events.BatchMessage(uuid.Must(uuid.NewV7()), evs)
}
