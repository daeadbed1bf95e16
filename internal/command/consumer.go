package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
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
// The stream is consumed through a watermill Router (Recoverer turns a panic into a nack, the
// router logs through slog and closes gracefully) over streamSubscriber, which hands it up to
// maxInFlight messages at once; the router runs a handler per message, and the handlers' commands
// are gathered into batches (gatherer), each applied in one transaction, after whose commit
// every message of the batch is acked. Requests on the api subject (plain core NATS, which
// watermill does not model) join the same batches.
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
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("creating command consumer: %w", err)
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second},
		watermill.NewSlogLoggerWithLevelMapping(h.cfg.Logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return fmt.Errorf("creating command router: %w", err)
	}
	g := newGatherer(h)
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

	stopAPI, err := h.serveAPI(ctx, nc, g)
	if err != nil {
		return err
	}
	defer stopAPI()
	if err := router.Run(ctx); err != nil {
		return fmt.Errorf("command router: %w", err)
	}
	return nil
}

// apiInFlight is how many api requests one node handles at once; more wait in the subscription.
const apiInFlight = 512

// serveAPI answers agate.<ns>.api.* requests (queue group apiQueue) until stop is called; stop
// waits for the requests in flight to be answered. Each request runs on its own goroutine so
// that concurrent requests join one batch.
func (h *Handler) serveAPI(ctx context.Context, nc *nats.Conn, g *gatherer) (stop func(), err error) {
	subjects := events.Subjects(h.cfg.Namespace)
	var wg sync.WaitGroup
	slots := make(chan struct{}, apiInFlight)
	sub, err := nc.QueueSubscribe(subjects.API("*"), apiQueue, func(m *nats.Msg) {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			out := g.do(ctx, Request{Ctx: telemetry.FromHeader(ctx, m.Header), Command: commandOf(m.Subject), Body: m.Data}, 0)
			reply, err := json.Marshal(out)
			if err != nil {
				reply = []byte(`{"ok":false,"error":{"code":"internal","message":"encoding the reply failed"}}`)
			}
			if m.Reply != "" {
				if err := m.Respond(reply); err != nil {
					h.cfg.Logger.WarnContext(ctx, "answering command request failed", slog.Any("error", err))
				}
			}
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", subjects.API("*"), err)
	}
	return func() {
		// Drain returns before the callbacks it still delivers have run: wait for the subscription
		// to be closed (bounded, should the connection be gone), then for the answers in flight.
		closed := sub.StatusChanged(nats.SubscriptionClosed)
		if err := sub.Drain(); err == nil {
			t := time.NewTimer(10 * time.Second)
			select {
			case <-closed:
			case <-t.C:
			}
			t.Stop()
		}
		wg.Wait()
	}, nil
}

var errTransient = errors.New("command could not be applied now")

// MaxInternalDeliveries is how many times a command that fails with an internal error is
// delivered before it is given up.
const MaxInternalDeliveries = 5

// commandOf is the last token of agate.<ns>.cmd.<command>.
func commandOf(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
