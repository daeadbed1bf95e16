package complete

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	BatchDefault   = 500
	MaxWaitDefault = 50 * time.Millisecond
)

// Config configures a Consumer.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned).
	Locks store.Locks
	// Batch is the most completions applied in one transaction. Default 500.
	Batch int
	// MaxWait is how long a fetch waits to fill a batch. Default 50ms.
	MaxWait time.Duration
	Logger  *slog.Logger
	// OnReleased is called after triggers went back to WAITING (wired to the acquirer's Wake).
	OnReleased func()
}

// Consumer applies completion messages in batches.
//
// It uses nats.go's jetstream package directly rather than a watermill router: a batch of
// messages is applied in one transaction and acked together after commit, which watermill's
// one-message-at-a-time handlers cannot express.
type Consumer struct {
	cfg    Config
	pool   *pgxpool.Pool
	js     jetstream.JetStream
	pub    Publisher
	tracer trace.Tracer
}

// Publisher publishes committed events (events.Relay).
type Publisher interface {
	Publish(ctx context.Context, evs []events.Event) error
}

// New builds a Consumer.
func New(cfg Config, pool *pgxpool.Pool, js jetstream.JetStream, pub Publisher) *Consumer {
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, MaxWaitDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.OnReleased == nil {
		cfg.OnReleased = func() {}
	}
	return &Consumer{cfg: cfg, pool: pool, js: js, pub: pub, tracer: telemetry.Tracer("complete")}
}

// DurableName is the shared durable consumer of all scheduler nodes on the DONE stream.
const DurableName = "scheduler-done"

// Run consumes until ctx is cancelled.
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, events.StreamDone(c.cfg.Namespace), jetstream.ConsumerConfig{
		Durable:       DurableName,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 20 * c.cfg.Batch,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("creating completion consumer: %w", err)
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(c.cfg.Batch, jetstream.FetchMaxWait(c.cfg.MaxWait))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.cfg.Logger.WarnContext(ctx, "fetching completions failed; retrying", slog.Any("error", err))
			sleep(ctx, time.Second)
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			c.cfg.Logger.DebugContext(ctx, "completion fetch ended", slog.Any("error", err))
		}
		if len(msgs) == 0 {
			continue
		}
		c.handle(ctx, msgs)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Outcome is one decoded completion message.
type Outcome struct {
	Type   string
	Event  events.Event
	Result events.JobResult
}

// handle decodes msgs, applies the valid ones in one transaction and acks after commit.
func (c *Consumer) handle(ctx context.Context, msgs []jetstream.Msg) {
	var outs []Outcome
	var ok []jetstream.Msg
	for _, m := range msgs {
		o, err := decode(m)
		if err != nil {
			// Garbage cannot become valid by redelivery: say so and drop it.
			c.cfg.Logger.ErrorContext(ctx, "dropping malformed completion message",
				slog.String("subject", m.Subject()), slog.Any("error", err))
			_ = m.Term()
			continue
		}
		outs, ok = append(outs, o), append(ok, m)
	}
	// One span per completion, in the job's trace (DESIGN §9), around the batch that records it.
	spans := make([]trace.Span, len(outs))
	for i, o := range outs {
		_, spans[i] = c.tracer.Start(telemetry.WithTraceParent(ctx, o.Event.TraceParent), "agate.complete",
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("agate.fire_id", o.Result.FireID.String()),
				attribute.String("agate.job", o.Result.Job.Key().String()), attribute.Int("agate.batch", len(outs))))
	}
	released, err := c.Apply(ctx, outs)
	for _, span := range spans {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "applying completions failed; they will be redelivered",
			slog.Int("completions", len(outs)), slog.Any("error", err))
		for _, m := range ok {
			_ = m.NakWithDelay(time.Second)
		}
		return
	}
	for _, m := range ok {
		_ = m.Ack()
	}
	if released > 0 {
		c.cfg.OnReleased()
	}
}

func decode(m jetstream.Msg) (Outcome, error) {
	var o Outcome
	env, err := events.Decode(m.Data(), &o.Result)
	if err != nil {
		return o, err
	}
	if env.Type != events.TypeJobCompleted && env.Type != events.TypeJobFailed {
		return o, fmt.Errorf("unexpected event type %q on a completion subject", env.Type)
	}
	if o.Result.FireID == uuid.Nil {
		return o, errors.New("completion has no fireId")
	}
	id, _ := uuid.Parse(env.ID)
	o.Type = env.Type
	o.Event = events.Event{
		ID: id, Type: env.Type, Source: env.Source, Subject: env.Subject, Time: env.Time, Data: env.Data,
		Aggregate: events.AggregateJob, AggregateID: o.Result.Job.Key().String(),
		TraceParent: m.Headers().Get("traceparent"),
	}
	return o, nil
}

// ends reports whether an outcome ends the fire's execution.
func (o Outcome) ends() bool {
	return o.Type == events.TypeJobCompleted || (o.Result.Error != nil && o.Result.Error.Final)
}

// Apply records outcomes in one transaction and returns how many triggers were released.
func (c *Consumer) Apply(ctx context.Context, outs []Outcome) (int, error) {
	if len(outs) == 0 {
		return 0, nil
	}
	ns := c.cfg.Namespace
	released := 0
	var toPublish []events.Event
	err := store.InTx(ctx, c.pool, func(tx pgx.Tx) error {
		released = 0
		jobs := make([][2]string, len(outs))
		for i, o := range outs {
			jobs[i] = [2]string{o.Result.Job.Group, o.Result.Job.Name}
		}
		if err := c.cfg.Locks.Jobs(ctx, tx, jobs); err != nil {
			return err
		}
		var ids []uuid.UUID
		for _, o := range outs {
			if o.ends() {
				ids = append(ids, o.Result.FireID)
			}
		}
		var tg, tn, jg, jn, ncg, ncn []string
		deleted := map[uuid.UUID]bool{}
		if len(ids) > 0 {
			rows, err := tx.Query(ctx, queries.Get("DeleteFired"), ids)
			if err != nil {
				return fmt.Errorf("deleting fired rows: %w", err)
			}
			for rows.Next() {
				var id uuid.UUID
				var a, b, cc, d string
				var nc bool
				if err := rows.Scan(&id, &a, &b, &cc, &d, &nc); err != nil {
					rows.Close()
					return fmt.Errorf("deleting fired rows: %w", err)
				}
				deleted[id] = true
				tg, tn, jg, jn = append(tg, a), append(tn, b), append(jg, cc), append(jn, d)
				if nc {
					ncg, ncn = append(ncg, cc), append(ncn, d)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("deleting fired rows: %w", err)
			}
		}
		var releasedEvs []events.Event
		if len(ncg) > 0 {
			rows, err := tx.Query(ctx, queries.Get("Release"), ns, ncg, ncn)
			if err != nil {
				return fmt.Errorf("releasing blocked triggers: %w", err)
			}
			keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (events.Key, error) {
				var k events.Key
				err := row.Scan(&k.Group, &k.Name)
				return k, err
			})
			if err != nil {
				return fmt.Errorf("releasing blocked triggers: %w", err)
			}
			now := time.Now()
			for _, k := range keys {
				ev, err := events.New(events.TypeTriggerReleased, events.Source(ns, c.cfg.InstanceID), events.AggregateTrigger,
					k.String(), events.Subjects(ns).Evt("trigger"), now, map[string]any{"trigger": k, "reason": "job completed"})
				if err != nil {
					return err
				}
				releasedEvs = append(releasedEvs, ev)
			}
			released = len(keys)
		}
		if len(tg) > 0 {
			complete := make([]string, len(tg))
			for i := range complete {
				complete[i] = store.StateComplete
			}
			if _, err := tx.Exec(ctx, queries.Get("DeleteCompleteTriggers"), ns, tg, tn, complete); err != nil {
				return fmt.Errorf("deleting completed triggers: %w", err)
			}
			if _, err := tx.Exec(ctx, queries.Get("DeleteOrphanJobs"), ns, jg, jn); err != nil {
				return fmt.Errorf("deleting finished jobs: %w", err)
			}
		}
		// An execution ends once: a second ending outcome for a fire whose row is already gone
		// (a redelivered or re-run completion) is not recorded again.
		evs := make([]events.Event, 0, len(outs))
		for _, o := range outs {
			if o.ends() && !deleted[o.Result.FireID] {
				continue
			}
			evs = append(evs, o.Event)
		}
		toPublish = releasedEvs
		return events.Append(ctx, tx, ns, append(evs, releasedEvs...))
	})
	if err != nil {
		return 0, fmt.Errorf("recording %d completions: %w", len(outs), err)
	}
	if c.pub != nil && len(toPublish) > 0 {
		if err := c.pub.Publish(ctx, toPublish); err != nil {
			c.cfg.Logger.WarnContext(ctx, "publishing release events failed; the outbox sweep will publish them",
				slog.Any("error", err))
		}
	}
	return released, nil
}
