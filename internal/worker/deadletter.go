package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
)

// A worker settles every delivery it finishes itself, the last one included, by publishing the
// outcome. One case it cannot settle: the last allowed delivery of a fire goes to a worker that
// dies (or whose outcome publish fails), so no worker ever sees the fire again and no outcome is
// published; the scheduler would keep the trigger BLOCKED until its stale-execution scan. JetStream
// reports that case with a MAX_DELIVERIES advisory; workers listen for it (in one queue group, so
// one of them answers) and publish JobFailed{final:true} for the fire: the dead-letter outcome.
// JetStream sends the advisory when the consumer next serves a pull request, so while some worker
// of the fire's type asks for fires. Advisories are not persisted: if no worker is connected when
// it is sent, the scheduler's recovery remains the safety net.

// deadLetterQueue is the queue group of the advisory subscription: one worker per namespace
// handles each advisory.
const deadLetterQueue = "agate-worker-dead-letters"

// maxDeliveriesAdvisory is the part of JetStream's io.nats.jetstream.advisory.v1.max_deliver we use.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries int    `json:"deliveries"`
}

// subscribeDeadLetters subscribes to the MAX_DELIVERIES advisories of the FIRED stream's
// consumers. It listens for every job type, not just this worker's, so a type's dead letters are
// reported as long as any worker of the namespace runs.
func (w *Worker) subscribeDeadLetters() (*nats.Subscription, chan *nats.Msg, error) {
	nc := w.js.Conn()
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + events.StreamFired(w.cfg.Namespace) + ".*"
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanQueueSubscribe(subject, deadLetterQueue, ch)
	if err == nil {
		err = nc.Flush() // the server knows of the subscription before Run fetches anything
	}
	if err != nil {
		return nil, nil, fmt.Errorf("worker: subscribing to %s (the NATS user needs subscribe permission on it): %w", subject, err)
	}
	return sub, ch, nil
}

// deadLetters answers the advisories of subscribeDeadLetters until ctx ends.
func (w *Worker) deadLetters(ctx context.Context, stream jetstream.Stream, sub *nats.Subscription, ch <-chan *nats.Msg) error {
	defer func() { _ = sub.Unsubscribe() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			var adv maxDeliveriesAdvisory
			if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
				w.log.WarnContext(ctx, "ignoring an unreadable max-deliveries advisory", "subject", m.Subject, "error", err)
				continue
			}
			if !strings.HasPrefix(adv.Consumer, events.WorkerDurablePrefix) {
				continue // another application's consumer on the stream
			}
			if err := w.deadLetter(ctx, stream, adv); err != nil {
				w.log.ErrorContext(ctx, "reporting a fire that ran out of deliveries failed; the scheduler's recovery will release it",
					"consumer", adv.Consumer, "stream_seq", adv.StreamSeq, "error", err)
			}
		}
	}
}

// deadLetter publishes the final JobFailed of each fire of the message stored at adv.StreamSeq
// (one, or a batch: a fire of it that had ended already ends once, the scheduler ignoring the
// second outcome).
func (w *Worker) deadLetter(ctx context.Context, stream jetstream.Stream, adv maxDeliveriesAdvisory) error {
	raw, err := stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return fmt.Errorf("reading JobFired at sequence %d of %s: %w", adv.StreamSeq, adv.Stream, err)
	}
	typ := strings.TrimPrefix(raw.Subject, w.subjects.Fired(""))
	bodies, err := events.Bodies(raw.Header, raw.Data)
	if err != nil {
		return fmt.Errorf("JobFired message at sequence %d is malformed: %w", adv.StreamSeq, err)
	}
	var errs []error
	for _, body := range bodies {
		var fired events.JobFired
		env, err := events.Decode(body, &fired)
		if err == nil {
			err = checkFired(env, fired, typ)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("JobFired at sequence %d is malformed: %w", adv.StreamSeq, err))
			continue
		}
		if err := w.deadLetterFire(fireTrace(ctx, raw.Header, env), typ, fired, adv.Deliveries); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deadLetterFire publishes the final JobFailed of one fire that ran out of deliveries; parent
// carries its trace context.
func (w *Worker) deadLetterFire(parent context.Context, typ string, fired events.JobFired, deliveries int) error {
	ctx, span := w.tracer.Start(parent, "agate.job.dead_letter",
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("agate.namespace", w.cfg.Namespace),
			attribute.String("agate.fire_id", fired.FireID.String()),
			attribute.String("agate.job", fired.Job.Key().String()),
			attribute.String("agate.job.type", typ),
			attribute.Int("agate.attempt", deliveries),
		))
	defer span.End()
	if !span.SpanContext().IsValid() {
		ctx = parent
	}
	msg := fmt.Sprintf("no worker finished the job in %d deliveries (the last worker stopped heartbeating or could not publish the outcome)",
		deliveries)
	span.SetStatus(codes.Error, msg)
	now := time.Now().UTC()
	result := events.JobResult{
		FireID: fired.FireID, Job: fired.Job, Trigger: fired.Trigger, ScheduledTime: fired.ScheduledTime,
		Worker: w.cfg.InstanceID, StartedTime: now, FinishedTime: now, Attempt: deliveries,
		TriggerState: fired.TriggerState, Error: &events.JobError{Message: msg, Retryable: true, Final: true},
	}
	if err := w.publish(ctx, typ, fired.Job.Key().String(), now, result); err != nil {
		return err
	}
	w.log.WarnContext(ctx, "job failed", "job", fired.Job.Key().String(), "type", typ, "fire_id", fired.FireID,
		"attempt", deliveries, "final", true, "retryable", true, "error", msg)
	return nil
}
