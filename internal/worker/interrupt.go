package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/events"
)

// ErrInterrupted is the cause of a handler's context cancelled by an interrupt_job command:
// context.Cause(ctx) tells a handler it was interrupted rather than timed out.
var ErrInterrupted = errors.New("interrupted by interrupt_job")

// interruptMaxAge is how old an interrupt request may be when it arrives: one delivered late (the
// scheduler's outbox catching up after a NATS outage) must not stop a later run.
const interruptMaxAge = 30 * time.Second

// executions are the runs in progress on this worker, by fire id, so that an interrupt can
// cancel them.
type executions struct {
	mu   sync.Mutex
	runs map[uuid.UUID]execution
}

type execution struct {
	job    events.Key
	cancel context.CancelCauseFunc
}

func (e *executions) add(fireID uuid.UUID, job events.Key, cancel context.CancelCauseFunc) (remove func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs == nil {
		e.runs = map[uuid.UUID]execution{}
	}
	e.runs[fireID] = execution{job: job, cancel: cancel}
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.runs, fireID)
	}
}

// interrupt cancels the runs of the fire, or (fireID nil) of the job, and says how many.
func (e *executions) interrupt(job events.Key, fireID uuid.UUID) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for id, x := range e.runs {
		if id == fireID || (fireID == uuid.Nil && x.job == job) {
			x.cancel(ErrInterrupted)
			n++
		}
	}
	return n
}

// subscribeInterrupts listens, on every worker (no queue group: the run may be anywhere), to
// JobInterruptRequested, which has a subject of its own (agate.<ns>.evt.interrupt): on the job
// events' subject every worker received every JobAdded and JobDeleted, two deliveries a one-shot
// fire for a pair of workers, and the data of every job of every type.
func (w *Worker) subscribeInterrupts(ctx context.Context) (*nats.Subscription, error) {
	return w.js.Conn().Subscribe(w.subjects.Evt("interrupt"), func(m *nats.Msg) {
		bodies, err := events.Bodies(m.Header, m.Data) // requests of one transaction share a message
		if err != nil {
			w.log.WarnContext(ctx, "ignoring a message on the interrupt subject that is not an interrupt request",
				"subject", m.Subject, "error", err)
			return
		}
		for _, body := range bodies {
			w.interruptFor(ctx, m.Subject, body)
		}
	})
}

// interruptFor interrupts the runs an interrupt request's body names.
func (w *Worker) interruptFor(ctx context.Context, subject string, body []byte) {
	var req events.InterruptRequest
	env, err := events.Decode(body, &req)
	if err != nil || env.Type != events.TypeJobInterruptRequested {
		w.log.WarnContext(ctx, "ignoring a message on the interrupt subject that is not an interrupt request",
			"subject", subject, "error", err)
		return
	}
	if age := time.Since(env.Time); age > interruptMaxAge {
		w.log.WarnContext(ctx, "ignoring an interrupt request that arrived late", "job", req.Job.String(), "age", age.Round(time.Second))
		return
	}
	if n := w.running.interrupt(req.Job, req.FireID); n > 0 {
		w.log.InfoContext(ctx, "interrupting runs", "job", req.Job.String(), "fire_id", req.FireID, "runs", n,
			"command_id", req.CommandID)
	}
}
