package command

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/telemetry"
)

// DurableName is the shared durable consumer of all scheduler nodes on the COMMANDS stream.
const DurableName = "scheduler-commands"

// apiQueue is the queue group of the request-reply subscribers: one node answers each request.
const apiQueue = "agate-scheduler"

// Run consumes commands from the COMMANDS stream and answers agate.<ns>.api.* requests until ctx
// is cancelled.
//
// The stream is consumed with nats.go's jetstream package directly: a transient failure must be
// answered with NakWithDelay and a rejection acked after its event is committed, and the
// request-reply path is plain core NATS, which watermill does not model.
func (h *Handler) Run(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	subjects := events.Subjects(h.cfg.Namespace)
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamCommands(h.cfg.Namespace), jetstream.ConsumerConfig{
		Durable:       DurableName,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1000,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("creating command consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		out := h.Handle(telemetry.FromHeader(ctx, m.Headers()), commandOf(m.Subject()), m.Data())
		if out.Transient() {
			_ = m.NakWithDelay(2 * time.Second)
			return
		}
		if err := m.Ack(); err != nil {
			h.cfg.Logger.WarnContext(ctx, "acking command failed; it will be redelivered and answered as before",
				slog.Any("error", err))
		}
	}, jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("consuming commands: %w", err)
	}
	defer cc.Stop()

	sub, err := nc.QueueSubscribe(subjects.API("*"), apiQueue, func(m *nats.Msg) {
		out := h.Handle(telemetry.FromHeader(ctx, m.Header), commandOf(m.Subject), m.Data)
		reply, err := json.Marshal(out)
		if err != nil {
			reply = []byte(`{"ok":false,"error":{"code":"internal","message":"encoding the reply failed"}}`)
		}
		if m.Reply != "" {
			if err := m.Respond(reply); err != nil {
				h.cfg.Logger.WarnContext(ctx, "answering command request failed", slog.Any("error", err))
			}
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", subjects.API("*"), err)
	}
	<-ctx.Done()
	_ = sub.Drain()
	return nil
}

// commandOf is the last token of agate.<ns>.cmd.<command>.
func commandOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
