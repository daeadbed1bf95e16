package devcluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// startTail starts logging one line per trigger scheduled and per job fired, the steps no
// component logs at info (the command consumer logs commands, the worker each job's outcome,
// recovery what it recovers), and returns the function that stops it.
//
// It reads the JetStream streams, not core NATS: an event the outbox sweep publishes a second time
// reaches core subscribers twice but is stored once (JetStream drops it by Nats-Msg-Id). Its
// ordered consumers deliver only messages stored after it started, so a restart never prints an
// old fire again; it is started before the node so that it misses none of this run's.
func startTail(ctx context.Context, js jetstream.JetStream, ns string, log *slog.Logger) (stop func(), err error) {
	var running []jetstream.ConsumeContext
	stop = func() {
		for _, cc := range running {
			cc.Stop()
		}
	}
	s := events.Subjects(ns)
	for _, src := range []struct{ stream, subject string }{
		{events.StreamFired(ns), s.All("fired")},
		{events.StreamEvents(ns), s.Evt("trigger")},
	} {
		cons, err := js.OrderedConsumer(ctx, src.stream, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{src.subject}, DeliverPolicy: jetstream.DeliverNewPolicy})
		if err != nil {
			stop()
			return nil, fmt.Errorf("reading stream %s: %w", src.stream, err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			bodies, err := events.Bodies(m.Headers(), m.Data()) // a transaction's trigger events share a message
			if err != nil {
				log.Debug("tail: unreadable message", slog.String("error", err.Error()))
				return
			}
			for _, body := range bodies {
				logEvent(log, body)
			}
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("reading stream %s: %w", src.stream, err)
		}
		running = append(running, cc)
	}
	return stop, nil
}

// tailData is the union of the event data fields the tail prints.
type tailData struct {
	FireID        string        `json:"fireId"`
	Job           events.JobRef `json:"job"`
	Trigger       events.Key    `json:"trigger"`
	ScheduledTime time.Time     `json:"scheduledTime"`
	NextFireTime  *time.Time    `json:"nextFireTime"`
}

// logEvent writes the line of one event body; other event types are left to their components.
func logEvent(log *slog.Logger, body []byte) {
	var d tailData
	env, err := events.Decode(body, &d)
	if err != nil {
		log.Debug("tail: unreadable event", slog.String("error", err.Error()))
		return
	}
	trigger := d.Trigger.Group + "." + d.Trigger.Name
	switch env.Type {
	case events.TypeTriggerScheduled:
		attrs := []any{slog.String("trigger", trigger)}
		if d.NextFireTime != nil {
			attrs = append(attrs, slog.Time("next_fire", *d.NextFireTime))
		}
		log.Info("scheduled", attrs...)
	case events.TypeJobFired:
		log.Info("fired", slog.String("job", d.Job.Group+"."+d.Job.Name), slog.String("trigger", trigger),
			slog.String("scheduled", d.ScheduledTime.Format(time.TimeOnly+".000")), slog.String("fire_id", d.FireID))
	}
}
