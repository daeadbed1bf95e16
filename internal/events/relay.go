package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/store"
)

// RelayConfig configures the outbox relay.
type RelayConfig struct {
	Namespace string
	// SweepInterval is how often the sweep looks for events nobody published. Default 1s.
	SweepInterval time.Duration
	// SweepDelay is how old an event must be before the sweep republishes it: younger ones are
	// normally being published by the node that committed them. Default 3s.
	SweepDelay time.Duration
	// SweepBatch is the most events one sweep transaction publishes. Default 1000.
	SweepBatch int
	// QueueLen is how many committed batches may wait for the publisher; beyond that (NATS slow
	// or down) Publish drops them for the sweep. Default 1024.
	QueueLen int
	Logger   *slog.Logger
}

// Relay publishes logged events to JetStream. Publish hands over the events a node just
// committed to a background publisher and returns at once, so a slow or absent NATS never holds
// up acquiring and firing: the log is the source of truth. Run runs that publisher and sweeps the
// log for events that were committed but never published (the node died between commit and
// publish, NATS was down, the queue was full) and publishes them again, in log order, behind a
// cursor.
//
// nats.go's jetstream package is used directly rather than a watermill publisher: the relay needs
// PublishMsgAsync with a bounded window and per-message PubAck futures to know what was stored.
type Relay struct {
	cfg   RelayConfig
	pool  *pgxpool.Pool
	js    jetstream.JetStream
	queue chan []Event
}

// NewRelay builds a relay.
func NewRelay(cfg RelayConfig, pool *pgxpool.Pool, js jetstream.JetStream) *Relay {
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, time.Second)
	cfg.SweepDelay = cmp.Or(cfg.SweepDelay, 3*time.Second)
	cfg.SweepBatch = cmp.Or(cfg.SweepBatch, 1000)
	cfg.QueueLen = cmp.Or(cfg.QueueLen, 1024)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Relay{cfg: cfg, pool: pool, js: js, queue: make(chan []Event, cfg.QueueLen)}
}

// Message returns the NATS message of e: the CloudEvents envelope as body, Nats-Msg-Id = event
// id for JetStream's de-duplication, and the W3C trace headers.
func Message(e Event) (*nats.Msg, error) {
	body, err := json.Marshal(e.Envelope())
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", e.ID, err)
	}
	msg := nats.NewMsg(e.Topic)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, e.ID.String())
	msg.Header.Set("Content-Type", "application/cloudevents+json")
	if e.TraceParent != "" {
		msg.Header.Set("traceparent", e.TraceParent)
		if e.TraceState != "" {
			msg.Header.Set("tracestate", e.TraceState)
		}
	}
	return msg, nil
}

// ErrQueueFull says committed events were left to the sweep because the publisher is behind.
var ErrQueueFull = errors.New("the publish queue is full (NATS slow or unreachable)")

// Publish queues committed events for publishing and returns at once. An error means they were
// not queued; they are in the log, and the sweep publishes them.
func (r *Relay) Publish(_ context.Context, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	select {
	case r.queue <- evs:
		return nil
	default:
		return ErrQueueFull
	}
}

// runPublisher publishes queued batches until ctx is cancelled.
func (r *Relay) runPublisher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case evs := <-r.queue:
			if err := publish(ctx, r.js, evs); err != nil && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "publishing committed events failed; the outbox sweep will publish them",
					slog.Int("events", len(evs)), slog.Any("error", err))
			}
		}
	}
}

func publish(ctx context.Context, js jetstream.JetStream, evs []Event) error {
	futures := make([]jetstream.PubAckFuture, 0, len(evs))
	for _, e := range evs {
		if e.Topic == "" {
			continue
		}
		msg, err := Message(e)
		if err != nil {
			return err
		}
		f, err := js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("publishing %s to %s: %w", e.Type, e.Topic, err)
		}
		futures = append(futures, f)
	}
	var errs []error
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs = append(errs, fmt.Errorf("publishing to %s: %w", f.Msg().Subject, err))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// Run publishes queued events and sweeps until ctx is cancelled.
func (r *Relay) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.runPublisher(ctx)
	}()
	defer func() { <-done }()
	t := time.NewTicker(r.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for {
			n, err := r.SweepOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				r.cfg.Logger.WarnContext(ctx, "outbox sweep failed; will retry", slog.Any("error", err))
				break
			}
			if n < r.cfg.SweepBatch {
				break
			}
		}
	}
}

// SweepOnce publishes one batch of events older than SweepDelay that lie after the cursor, then
// advances the cursor. It returns how many it published (0 when another node holds the cursor).
func (r *Relay) SweepOnce(ctx context.Context) (int, error) {
	published := 0
	err := store.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		var lastXID string
		var lastSeq int64
		err := tx.QueryRow(ctx, queries.Get("LockCursor"), r.cfg.Namespace).Scan(&lastXID, &lastSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another node is sweeping
		}
		if err != nil {
			return fmt.Errorf("reading outbox cursor: %w", err)
		}
		rows, err := tx.Query(ctx, queries.Get("SweepBatch"), r.cfg.Namespace, lastXID, lastSeq, r.cfg.SweepBatch)
		if err != nil {
			return fmt.Errorf("reading outbox: %w", err)
		}
		cutoff := time.Now().Add(-r.cfg.SweepDelay)
		var evs []Event
		var seq int64
		var xid string
		for rows.Next() {
			var e Event
			var rowSeq int64
			var rowXID string
			var data []byte
			if err := rows.Scan(&rowSeq, &rowXID, &e.ID, &e.Type, &e.Source, &e.Aggregate, &e.AggregateID,
				&e.Topic, &e.Time, &data, &e.TraceParent); err != nil {
				rows.Close()
				return fmt.Errorf("reading outbox row: %w", err)
			}
			if e.Time.After(cutoff) {
				break // the rest is young: its own node is publishing it
			}
			e.Data, e.Subject = data, e.AggregateID
			evs, seq, xid = append(evs, e), rowSeq, rowXID
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading outbox: %w", err)
		}
		if len(evs) == 0 {
			return nil
		}
		if err := publish(ctx, r.js, evs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queries.Get("AdvanceCursor"), r.cfg.Namespace, xid, seq); err != nil {
			return fmt.Errorf("advancing outbox cursor: %w", err)
		}
		published = len(evs)
		return nil
	})
	return published, err
}

// Decode reads a CloudEvents message body into its envelope and data.
func Decode(body []byte, data any) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("event is not a CloudEvents JSON envelope: %w", err)
	}
	if _, err := uuid.Parse(env.ID); err != nil {
		return env, fmt.Errorf("event id %q is not a UUID", env.ID)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return env, fmt.Errorf("event %s (%s) has malformed data: %w", env.ID, env.Type, err)
	}
	return env, nil
}

// PublishNow publishes events and waits until JetStream stored (or de-duplicated) each one: for
// callers that must know, such as tests and tools.
func PublishNow(ctx context.Context, js jetstream.JetStream, evs []Event) error {
	return publish(ctx, js, evs)
}
