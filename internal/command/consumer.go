package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/telemetry"
)

// DurableName is the shared durable consumer of all scheduler nodes on the COMMANDS stream.
const DurableName = "scheduler-commands"

// Run consumes commands from the COMMANDS stream until ctx is cancelled. (Requests on
// agate.<ns>.api.<command> reach Apply through the scheduler's NATS service, internal/api, and
// join the same batches.)
//
// The stream is consumed through a watermill Router (Recoverer turns a panic into a nack, the
// router logs through slog and closes gracefully) over streamSubscriber, which hands it up to
// maxInFlight messages at once; the router runs a handler per message, and the handlers' commands
// are gathered into batches (gatherer), each applied in one transaction, after whose commit
// every message of the batch is acked.
func (h *Handler) Run(ctx context.Context, js jetstream.JetStream) error {
	subjects := events.Subjects(h.cfg.Namespace)
	// NATS may be restarting as the node starts: wait for it rather than stop the node.
	var cons jetstream.Consumer
	err := retry.Do(ctx, h.cfg.Logger, "creating the command consumer", natsconn.NotAnswering, func() error {
		var err error
		cons, err = js.CreateOrUpdateConsumer(ctx, events.StreamCommands(h.cfg.Namespace), jetstream.ConsumerConfig{
			Durable:       DurableName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 1000,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("creating command consumer: %w", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, routerLogger(h.cfg.Logger))
	if err != nil {
		return fmt.Errorf("creating command router: %w", err)
	}
	g := h.gather
	router.AddMiddleware(middleware.Recoverer)
	router.AddConsumerHandler("commands", subjects.All("cmd"),
		&streamSubscriber{cons: cons, nakDelay: 2 * time.Second, maxInFlight: 8 * g.max},
		func(m *message.Message) error {
			ctx := telemetry.WithTraceParent(m.Context(), m.Metadata.Get("traceparent"))
			cmd := commandOf(m.Metadata.Get(metaSubject))
			seq, _ := strconv.ParseUint(m.Metadata.Get(metaSequence), 10, 64)
			out := g.do(m.Context(), Request{Ctx: ctx, Command: cmd, Body: m.Payload}, seq)
			if !out.Transient() {
				return nil
			}
			// The database is unreachable (unavailable): redeliver until it answers, nothing is
			// lost. Anything else (internal) will not heal by itself: after a few deliveries the
			// command ends as a recorded rejection instead of looping.
			if deliveries, _ := strconv.Atoi(m.Metadata.Get(metaDeliveries)); out.Error.Code == CodeInternal && deliveries >= MaxInternalDeliveries {
				h.GiveUp(ctx, cmd, m.Payload, deliveries, out.Error)
				return nil
			}
			return errTransient // nacked: redelivered after the delay, answered then
		})

	if err := router.Run(ctx); err != nil {
		return fmt.Errorf("command router: %w", err)
	}
	return nil
}

var errTransient = errors.New("command could not be applied now")

// MaxInternalDeliveries is how many times a command that fails with an internal error is
// delivered before it is given up.
const MaxInternalDeliveries = 5

// commandOf is the last token of agate.<ns>.cmd.<command>.
func commandOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// routerLogger is the watermill router's logger: its Info as slog's Debug, and its Trace and
// Debug dropped before anything is built when the level is off. watermill's slog adapter builds
// every line's attributes first, and the router writes two Trace lines per message: 3 % of a
// scheduler's CPU while commands came in.
func routerLogger(l *slog.Logger) watermill.LoggerAdapter {
	return quietLogger{watermill.NewSlogLoggerWithLevelMapping(l, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}), l}
}

type quietLogger struct {
	watermill.LoggerAdapter
	l *slog.Logger
}

func (q quietLogger) Trace(msg string, fields watermill.LogFields) {
	if q.l.Enabled(context.Background(), watermill.LevelTrace) {
		q.LoggerAdapter.Trace(msg, fields)
	}
}

func (q quietLogger) Debug(msg string, fields watermill.LogFields) {
	if q.l.Enabled(context.Background(), slog.LevelDebug) {
		q.LoggerAdapter.Debug(msg, fields)
	}
}

func (q quietLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return quietLogger{q.LoggerAdapter.With(fields), q.l}
}
