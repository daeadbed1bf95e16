package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/telemetry"
)

// handle takes one JobFired message, d, from receipt to ack (or nak, or term). The message is
// heartbeated the whole time this worker holds it, including while its fires wait for run slots.
// A message may hold several fires (a batch: docs/contract.md, "Batches of fires"): each runs
// as a fire of its own, on a share of the message (events.Share), which is settled once every
// fire in it has ended. ctx ends when the worker stops fetching; jobCtx only after the drain timeout.
func (w *Worker) handle(ctx, jobCtx context.Context, typ string, d delivery) {
	msg, bodies := d.msg, d.bodies
	stopHeartbeat := w.heartbeat(msg)
	defer stopHeartbeat()

	deliveries := 1
	if meta, err := msg.Metadata(); err == nil {
		deliveries = int(meta.NumDelivered)
	}
	if d.err != nil {
		w.terminate(ctx, msg, msg.Subject(), deliveries, d.err)
		return
	}
	if len(bodies) > 1 && deliveries > 1 {
		if bodies = w.unended(ctx, typ, bodies); len(bodies) == 0 {
			if err := msg.Ack(); err != nil {
				w.log.WarnContext(ctx, "ack failed; JetStream will deliver the batch again", "subject", msg.Subject(), "error", err)
			}
			return
		}
	}
	if len(bodies) == 1 && msg.Headers().Get("Content-Type") != events.ContentTypeBatch {
		w.fire(ctx, jobCtx, typ, msg, msg.Headers(), bodies[0], deliveries)
		return
	}
	share := events.NewShare(msg, len(bodies))
	var wg sync.WaitGroup
	for _, body := range bodies[1:] {
		wg.Add(1)
		w.runners.Go(func() {
			defer wg.Done()
			w.fire(ctx, jobCtx, typ, share, nil, body, deliveries)
		})
	}
	w.fire(ctx, jobCtx, typ, share, nil, bodies[0], deliveries)
	wg.Wait()
}

// terminate ends a message that cannot be read: it will not become readable, so JetStream should
// not redeliver it MaxDeliver times. Its content is not logged (it may hold secrets).
func (w *Worker) terminate(ctx context.Context, s settler, subject string, deliveries int, err error) {
	if _, ok := s.(events.Share); ok {
		w.log.ErrorContext(ctx, "dropping a malformed JobFired of a batch; its other fires run", "subject", subject,
			"attempt", deliveries, "error", err)
		_ = s.TermWithReason("")
		return
	}
	w.log.ErrorContext(ctx, "terminating malformed JobFired message", "subject", subject, "attempt", deliveries, "error", err)
	if err := s.TermWithReason("malformed JobFired: " + err.Error()); err != nil {
		w.log.WarnContext(ctx, "terminating malformed message failed; JetStream will redeliver it",
			"subject", subject, "error", err)
	}
}

// fire runs one fire, body, of a message that JetStream delivered for the deliveries-th time,
// and settles s, the message or the fire's share of it. h is the message's headers, nil for a
// fire of a batch (each element carries its own trace context). A retryable failure of a fire
// that has the message to itself naks it with a delay, for any worker to run again; one that
// shares its message runs again here after the delay (at attempt deliveries+1, +2, ...): a nak
// would run its batch-mates again too.
func (w *Worker) fire(ctx, jobCtx context.Context, typ string, s settler, h nats.Header, body []byte, deliveries int) {
	var fired events.JobFired
	env, err := events.Decode(body, &fired)
	if err == nil {
		err = checkFired(env, fired, typ)
	}
	if err != nil {
		w.terminate(ctx, s, w.subjects.Fired(typ), deliveries, err)
		return
	}
	parent := fireTrace(jobCtx, h, env)
	// A fire that has its message to itself is given back when the worker stops before it starts
	// (now rather than after AckWait). One that shares it is run until the drain timeout: given
	// back, its batch-mates that ended would run again.
	_, shared := s.(events.Share)
	stop := ctx
	if shared {
		stop = jobCtx
	}
	for attempt := deliveries; ; attempt++ {
		select {
		case w.slots <- struct{}{}:
		case <-stop.Done():
			_ = s.Nak()
			return
		}
		retryIn := w.run(jobCtx, parent, typ, s, fired, attempt, !shared)
		<-w.slots
		if retryIn == 0 {
			return
		}
		t := time.NewTimer(retryIn)
		select {
		case <-t.C:
		case <-stop.Done():
			t.Stop()
			w.log.WarnContext(ctx, "worker stopped while a job waited to be retried; its batch of fires will be delivered again",
				"fire_id", fired.FireID, "type", typ)
			_ = s.Nak()
			return
		}
	}
}

// fireTrace returns ctx carrying a fire's trace context: its envelope's traceparent member (each
// fire of a batch carries its own), else its message's headers.
func fireTrace(ctx context.Context, h nats.Header, env events.Envelope) context.Context {
	if env.TraceParent != "" {
		return telemetry.WithTraceParent(ctx, env.TraceParent)
	}
	return telemetry.FromHeader(ctx, h)
}

// settler settles a delivery: a jetstream.Msg, or a fire's share of one (events.Share).
type settler interface {
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	TermWithReason(reason string) error
}

// checkFired rejects events that decode but cannot be run.
func checkFired(env events.Envelope, fired events.JobFired, typ string) error {
	switch {
	case env.Type != events.TypeJobFired:
		return fmt.Errorf("event type is %q, want %q", env.Type, events.TypeJobFired)
	case fired.FireID == uuid.Nil:
		return errors.New("data.fireId is missing")
	case fired.Job.Type != typ:
		return fmt.Errorf("data.job.type %q does not match the subject's job type %q", fired.Job.Type, typ)
	case fired.Job.Group == "" || fired.Job.Name == "":
		return errors.New("data.job.group and data.job.name are required")
	}
	return nil
}

// heartbeat tells JetStream every AckWait/3 that msg is still being worked on, until the
// returned function is called. A timer that rearms itself, not a goroutine with a ticker: most
// jobs end long before their first heartbeat, and the goroutine was 6 % of a worker's CPU in a
// burst.
func (w *Worker) heartbeat(msg jetstream.Msg) (stop func()) {
	every := w.cfg.AckWait / 3
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		if err := msg.InProgress(); err != nil {
			w.log.Debug("heartbeat failed", "subject", msg.Subject(), "error", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(every)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// run executes the handler once, as attempt, and publishes its outcome; then it settles s (ack
// or nak) and returns 0, or, after a retryable failure with attempts left when !nak, leaves s
// unsettled and returns the delay before the next attempt. parent carries the fire's trace
// context.
func (w *Worker) run(jobCtx, parent context.Context, typ string, s settler, fired events.JobFired, attempt int, nak bool) (retryIn time.Duration) {
	key := fired.Job.Key().String()
	ctx, span := w.tracer.Start(parent, "agate.job.run", trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(telemetry.Messaging(telemetry.OpProcess, w.subjects.Fired(typ))...)
		span.SetAttributes(
			attribute.String("agate.namespace", w.cfg.Namespace),
			attribute.String("agate.fire_id", fired.FireID.String()),
			attribute.String("agate.job", key),
			attribute.String("agate.job.type", typ),
			attribute.String("agate.trigger", fired.Trigger.String()),
			attribute.Int("agate.attempt", attempt),
			attribute.Bool("agate.recovering", fired.Recovering))
	}
	defer span.End()
	if !span.SpanContext().IsValid() {
		// No tracer provider is installed: keep the fire's own trace context, so the handler and
		// the completion event still carry it.
		ctx = parent
	}

	log := withLazy(w.log, slog.String("job", key), slog.String("type", typ), slog.Any("fire_id", fired.FireID),
		slog.Int("attempt", attempt))
	timeout := w.cfg.DefaultTimeout
	if fired.Timeout != "" {
		// The scheduler writes the job's timeout as time.Duration.String (docs/contract.md).
		if d, err := time.ParseDuration(fired.Timeout); err == nil && d > 0 {
			timeout = d
		} else {
			log.WarnContext(ctx, "ignoring the job's timeout: not a positive Go duration such as \"5m0s\"", "timeout", fired.Timeout,
				"using", timeout)
		}
	}

	h, _ := w.reg.Handler(typ)
	started := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	runCtx, interrupt := context.WithCancelCause(runCtx)
	forget := w.running.add(fired.FireID, fired.Job.Key(), interrupt)
	out := &output{}
	w.metrics.started(ctx, typ, attempt, started.Sub(fired.ScheduledTime))
	err := callHandler(runCtx, h, Job{JobFired: fired, Attempt: attempt, Logger: log, out: out})
	forget()
	interrupted := err != nil && errors.Is(context.Cause(runCtx), ErrInterrupted)
	switch {
	case interrupted:
		err = Permanent(fmt.Errorf("%w: %w", ErrInterrupted, err))
	case err != nil && errors.Is(runCtx.Err(), context.DeadlineExceeded):
		err = fmt.Errorf("job timed out after %s: %w", timeout, err)
	}
	interrupt(nil)
	cancel()
	finished := time.Now()

	if jobCtx.Err() != nil {
		// The drain timeout cancelled the job: this is not its outcome. Leave it to another worker.
		w.metrics.finished(ctx, typ, outcomeCancelled, finished.Sub(started))
		span.SetStatus(codes.Error, "worker stopped before the job finished")
		log.WarnContext(ctx, "job cancelled by shutdown; it will be redelivered", "duration", finished.Sub(started))
		_ = s.Nak()
		return 0
	}

	result := events.JobResult{
		FireID: fired.FireID, Job: fired.Job, Trigger: fired.Trigger, ScheduledTime: fired.ScheduledTime,
		Worker: w.cfg.InstanceID, StartedTime: started.UTC(), FinishedTime: finished.UTC(), Attempt: attempt,
		TriggerState: fired.TriggerState,
	}
	evType, final := events.TypeJobCompleted, true
	if err == nil {
		result.Data = out.data
	} else {
		retryable := !IsPermanent(err)
		final = !retryable || attempt >= w.cfg.MaxDeliver
		evType = events.TypeJobFailed
		result.Error = &events.JobError{Message: truncate(err.Error(), maxErrorMessage), Retryable: retryable, Final: final,
			Interrupted: interrupted}
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.SetAttributes(attribute.Bool("agate.final", final))
	outcome := outcomeCompleted
	switch {
	case err != nil && final:
		outcome = outcomeFailedFinal
	case err != nil:
		outcome = outcomeFailed
	}
	w.metrics.finished(ctx, typ, outcome, finished.Sub(started))

	if perr := w.publish(ctx, typ, key, finished, result); perr != nil {
		delay := w.backoff(attempt)
		log.WarnContext(ctx, "publishing the job's outcome failed; the fire will be redelivered",
			"outcome", evType, "retry_in", delay, "error", perr)
		span.RecordError(perr)
		if err := s.NakWithDelay(delay); err != nil {
			log.WarnContext(ctx, "nak failed; JetStream will redeliver after AckWait", "error", err)
		}
		return 0
	}

	attrs := []any{"duration", finished.Sub(started)}
	switch {
	case err == nil:
		log.InfoContext(ctx, "job completed", attrs...)
	case final:
		log.WarnContext(ctx, "job failed", append(attrs, "final", true, "retryable", !IsPermanent(err), "error", err)...)
	default:
		delay := w.backoff(attempt)
		log.WarnContext(ctx, "job failed; will retry", append(attrs, "final", false, "retryable", true, "retry_in", delay, "error", err)...)
		if !nak {
			return delay
		}
		if err := s.NakWithDelay(delay); err != nil {
			log.WarnContext(ctx, "nak failed; JetStream will redeliver after AckWait", "error", err)
		}
		return 0
	}
	if err := s.Ack(); err != nil {
		log.WarnContext(ctx, "ack failed after the outcome was published; the fire may run again", "error", err)
	}
	return 0
}

// maxErrorMessage bounds the error message carried by a JobFailed event, so a handler returning
// a huge error (a whole response body) cannot inflate events and the log.
const maxErrorMessage = 4 << 10

// truncate shortens s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// callHandler runs h, turning a panic into an error.
func callHandler(ctx context.Context, h HandlerFunc, job Job) (err error) {
	defer func() {
		if r := recover(); r != nil {
			job.Logger.ErrorContext(ctx, "job handler panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("job handler panicked: %v", r)
		}
	}()
	return h(ctx, job)
}

// publish sends the outcome and waits for JetStream's acknowledgement, retrying for a while when
// NATS is unreachable (the fire stays heartbeated meanwhile).
func (w *Worker) publish(ctx context.Context, typ, key string, now time.Time, result events.JobResult) error {
	evType := events.TypeJobCompleted
	if result.Error != nil {
		evType = events.TypeJobFailed
	}
	ev, err := events.New(evType, w.source, events.AggregateJob, key, w.subjects.Done(typ), now, result)
	if err != nil {
		return err
	}
	sc := trace.SpanContextFromContext(ctx)
	ev.TraceParent = telemetry.TraceParent(ctx)
	if ts := sc.TraceState().String(); ts != "" {
		ev.TraceState = ts
	}
	if err := w.outcomes.publish(ctx, ev); err != nil {
		return fmt.Errorf("publishing %s: %w", evType, err)
	}
	return nil
}

// deliver publishes msg and waits until JetStream stored it, retrying for publishRetryFor
// when NATS is unreachable.
func (w *Worker) deliver(ctx context.Context, msg *nats.Msg) error {
	deadline := time.Now().Add(publishRetryFor)
	delay := 100 * time.Millisecond
	for {
		err := w.store(ctx, msg)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || w.js.Conn().IsClosed() || time.Now().Add(delay).After(deadline) {
			return fmt.Errorf("to %s: %w", msg.Subject, err)
		}
		w.log.DebugContext(ctx, "publishing job outcomes failed; retrying", "subject", msg.Subject, "error", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// pubAckWait bounds the wait for one publish's acknowledgement.
const pubAckWait = 5 * time.Second

// errReconnected ends a wait for a PubAck that went with the old connection.
var errReconnected = errors.New("the NATS connection was re-established while waiting for JetStream's acknowledgement")

// store publishes msg and waits until JetStream stored it, for up to pubAckWait. The publish is
// asynchronous, so the acknowledgement is read on the NATS client's one reply goroutine instead
// of the job's: reading it grew every job goroutine's stack (runtime.copystack, a tenth of a
// worker's CPU in a steady flow). The client bounds the acknowledgements awaited at once
// (PublishAsyncMaxPending). A reconnect ends the wait: an acknowledgement lost with the old
// connection never comes, and publishing again is safe (same Nats-Msg-Id: JetStream drops the
// copy). The wait selects on a timer and the reconnect rather than deriving a context with a
// deadline and an AfterFunc per publish, which registered with contexts every job shares.
func (w *Worker) store(ctx context.Context, msg *nats.Msg) error {
	reconnected := w.reconnected.context().Done()
	f, err := w.js.PublishMsgAsync(msg)
	if err != nil {
		return err
	}
	t := time.NewTimer(pubAckWait)
	defer t.Stop()
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-reconnected:
		return errReconnected
	case <-t.C:
		return fmt.Errorf("no acknowledgement from JetStream within %s: %w", pubAckWait, context.DeadlineExceeded)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backoff is the delay before attempt+1: RetryDelay doubled per attempt up to MaxRetryDelay.
func (w *Worker) backoff(attempt int) time.Duration {
	return retry.Delay(attempt, w.cfg.RetryDelay, w.cfg.MaxRetryDelay)
}
