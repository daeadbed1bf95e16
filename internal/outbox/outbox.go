package outbox

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/testsignal"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Config configures an Outbox.
type Config struct {
	Namespace string
	// InstanceID is the node's: it vouches at check-in for the events it published (Published).
	InstanceID string
	// SweepInterval is how often the sweep looks for events nobody published. Default 1s.
	SweepInterval time.Duration
	// SweepDelay is how old an event must be before the sweep republishes it: younger ones are
	// normally being published by the node that committed them. Default 3s.
	SweepDelay time.Duration
	// SweepBatch bounds one sweep transaction: the transactions it reads, and the events it
	// publishes (more only when one transaction holds more). Default 1000.
	SweepBatch int
	// QueueLen is how many committed transactions' events may wait for the publisher; beyond
	// that (NATS slow or down) they are left to the sweep. Default 1024.
	QueueLen int
	// EventBatch is the most events of the EVENTS stream published in one message (a batch:
	// docs/contract.md, "Batches of events"); 1 publishes each alone, for readers that do not
	// read batches. Default EventBatchDefault.
	EventBatch int
	// FireBatch is the most JobFired of one transaction and job type published in one message
	// (docs/contract.md, "Batches of fires"); 1 publishes each alone, for workers that do not
	// read batches. Default FireBatchDefault.
	FireBatch int
	Logger    *slog.Logger
}

// EventBatchDefault is Config.EventBatch's default. The bus's costs are per message more than
// per byte, and the completion of a one-shot's fire logs an event for EVENTS (the JobDeleted of
// its job), which a burst's completions share with the others of their transaction.
const EventBatchDefault = 100

// FireBatchDefault is Config.FireBatch's default: a message and its acknowledgements cost
// nats-server, the node and the workers far more than a fire's bytes, and in 2-node bursts of
// 20,000 one-shots batches of 20 and of 50 did as well (docs/performance-history.md); a smaller
// batch ties fewer fires to the slowest of them, on one worker.
const FireBatchDefault = 20

// Outbox writes events to the log in the transaction of the change they describe and publishes
// them to JetStream after commit.
//
// InTx is the one way a step changes state: the events its function appends are inserted in the
// same transaction and, once the commit succeeded, handed to a background publisher, so a slow
// or absent NATS never holds up acquiring and firing. Run runs that publisher and the sweep,
// which publishes, in log order behind a cursor, every committed event that was not published
// (its node died between commit and publish, NATS was down, the queue was full).
//
// nats.go's jetstream package is used directly rather than a watermill publisher: the outbox
// needs PublishMsgAsync with per-message PubAck futures to know what was stored.
type Outbox struct {
	cfg   Config
	pool  *pgxpool.Pool
	js    jetstream.JetStream
	queue chan queued
	pub   *published
	// evtPrefix and firedPrefix start the subjects of the EVENTS and FIRED streams, whose events
	// go in batches.
	evtPrefix, firedPrefix string

	TestSignals TestSignals
}

// TestSignals tell tests what the outbox did (see internal/testsignal).
type TestSignals struct {
	Published testsignal.Signal[int] // a committed batch was published: its event count
	Swept     testsignal.Signal[int] // a sweep pass published this many events
}

// New builds an Outbox. js may be nil for an outbox that only writes the log (its events are
// then published by another node's sweep).
func New(cfg Config, pool *pgxpool.Pool, js jetstream.JetStream) *Outbox {
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, time.Second)
	cfg.SweepDelay = cmp.Or(cfg.SweepDelay, 3*time.Second)
	cfg.SweepBatch = cmp.Or(cfg.SweepBatch, 1000)
	cfg.QueueLen = cmp.Or(cfg.QueueLen, 1024)
	cfg.EventBatch = cmp.Or(cfg.EventBatch, EventBatchDefault)
	cfg.FireBatch = cmp.Or(cfg.FireBatch, FireBatchDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Outbox{cfg: cfg, pool: pool, js: js, queue: make(chan queued, cfg.QueueLen), pub: newPublished(),
		evtPrefix:   strings.TrimSuffix(events.Subjects(cfg.Namespace).All("evt"), ">"),
		firedPrefix: strings.TrimSuffix(events.Subjects(cfg.Namespace).All("fired"), ">")}
}

// Tx is a transaction that records the events of the change it makes.
type Tx struct {
	pgx.Tx
	evs        []events.Event
	mayRepeat  map[uuid.UUID]bool // ids of events from the bus the log may hold (AppendFromBus)
	savepoints int                // savepoints taken, to name the next
	onCommit   []func()           // see OnCommit
}

// Append records events of this transaction's change; they are written to the log before
// commit and published after.
func (tx *Tx) Append(evs ...events.Event) { tx.evs = append(tx.evs, evs...) }

// AppendFromBus records events taken from the bus (without a topic: they are not published
// again) that the log may hold already, as a redelivered message brings them: the log skips
// those, at the price of a probe of every partition of the log per event. The probe looks only
// among JobFailed events from the bus (the partial index events_bus_failed, migration 019): the
// outcomes that may repeat are failures that did not end their execution. An event from the bus
// the log cannot hold yet goes through Append: an outcome that ended its execution in this
// transaction, since the log records an ending outcome only in the transaction that ends it.
func (tx *Tx) AppendFromBus(evs ...events.Event) {
	if tx.mayRepeat == nil {
		tx.mayRepeat = make(map[uuid.UUID]bool, len(evs))
	}
	for _, e := range evs {
		tx.mayRepeat[e.ID] = true
	}
	tx.evs = append(tx.evs, evs...)
}

// OnCommit has f run once the transaction committed, and never when it did not: for what must
// count only what happened, such as metrics. Functions registered in a Savepoint that rolls back
// go with it. They run in order, on InTx's goroutine, before the events are queued for
// publishing: whoever sees an event on the bus sees what its transaction's functions did.
func (tx *Tx) OnCommit(f func()) { tx.onCommit = append(tx.onCommit, f) }

// Savepoint runs fn after a SAVEPOINT of tx: when fn returns an error its writes and the events
// it appended are rolled back to the savepoint and the rest of tx goes on; else they stay part
// of tx. The error is fn's (joined with the rollback's, when that failed too: tx is then dead).
//
// The savepoint is not released when fn succeeds: it ends with the transaction, and a batch of
// commands saves a round trip per command. Savepoints are named in sequence, so nested ones
// roll back to their own.
func (tx *Tx) Savepoint(ctx context.Context, fn func(tx *Tx) error) error {
	tx.savepoints++
	name := "agate_sp_" + strconv.Itoa(tx.savepoints)
	if _, err := tx.Exec(ctx, "savepoint "+name); err != nil {
		return fmt.Errorf("starting savepoint: %w", err)
	}
	n, m := len(tx.evs), len(tx.onCommit)
	err := fn(tx)
	if err != nil {
		tx.evs, tx.onCommit = tx.evs[:n], tx.onCommit[:m]
		if _, rerr := tx.Exec(ctx, "rollback to savepoint "+name); rerr != nil {
			return errors.Join(err, fmt.Errorf("rolling back to savepoint: %w", rerr))
		}
	}
	return err
}

// queued is a committed transaction's events waiting for the publisher.
type queued struct {
	evs []events.Event
	tx  *pendingTx
}

// InTx runs fn in a transaction. The events fn appended are written to the log in that
// transaction, in one statement; once the commit succeeded they are queued for publishing. An
// event that cannot be queued is in the log, and the sweep publishes it.
func (o *Outbox) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	return o.inTx(ctx, store.InTx, fn)
}

// InHotTx is InTx in a transaction of the fire path (store.InHotTx: generic plans, index order).
func (o *Outbox) InHotTx(ctx context.Context, fn func(tx *Tx) error) error {
	return o.inTx(ctx, store.InHotTx, fn)
}

func (o *Outbox) inTx(ctx context.Context, begin func(context.Context, *pgxpool.Pool, func(pgx.Tx) error) error, fn func(tx *Tx) error) error {
	var evs []events.Event
	var onCommit []func()
	pt := o.pub.begin()
	err := begin(ctx, o.pool, func(ptx pgx.Tx) error {
		tx := &Tx{Tx: ptx}
		if err := fn(tx); err != nil {
			return err
		}
		evs, onCommit = tx.evs, tx.onCommit
		xid, err := appendEvents(ctx, ptx, o.cfg.Namespace, evs, tx.mayRepeat)
		if err == nil && xid != 0 {
			o.pub.assigned(pt, xid)
		}
		return err
	})
	if err != nil {
		o.pub.failed(pt)
		return err
	}
	for _, f := range onCommit {
		f()
	}
	o.enqueue(ctx, evs, pt)
	return nil
}

// PublishedBelow is the xid below which every event this node committed is stored in
// JetStream (see published); a check-in records it for the sweep.
func (o *Outbox) PublishedBelow() uint64 { return o.pub.below() }

// Seen tells the outbox an xid the database assigned to this node (a check-in's) and the xid
// of the sweep's cursor, so that PublishedBelow can move on while the node is idle and past
// events the sweep has published.
func (o *Outbox) Seen(xid, cursor uint64) { o.pub.seen(xid, cursor) }

// appendEvents writes evs to the log in tx, in one statement, and returns the transaction's
// xid (0 when evs is empty). Those whose id is in mayRepeat are skipped when the log holds them.
func appendEvents(ctx context.Context, tx pgx.Tx, namespace string, evs []events.Event, mayRepeat map[uuid.UUID]bool) (uint64, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	if slices.ContainsFunc(evs, func(e events.Event) bool { return e.Topic == "" }) {
		// Events from the bus may come twice, even in one batch: a copy within the batch is
		// left out here.
		seen := make(map[uuid.UUID]bool, len(evs))
		evs = slices.DeleteFunc(slices.Clone(evs), func(e events.Event) bool {
			dup := e.Topic == "" && seen[e.ID]
			seen[e.ID] = true
			return dup
		})
	}
	query := "Append"
	var probe []bool
	if len(mayRepeat) > 0 && slices.ContainsFunc(evs, func(e events.Event) bool { return mayRepeat[e.ID] }) {
		query, probe = "AppendFromBus", make([]bool, len(evs))
		for i, e := range evs {
			probe[i] = mayRepeat[e.ID]
		}
	}
	n := len(evs)
	ids := make([]uuid.UUID, n)
	types, sources, aggs, aggIDs, topics, traces := make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	times := make([]time.Time, n)
	// The data go as they are: pgx encodes a [][]byte for text[] as it does a []string, without
	// a string copy of every event's data (a third of the cost of encoding the parameter).
	datas := make([][]byte, n)
	for i, e := range evs {
		ids[i], types[i], sources[i], aggs[i], aggIDs[i] = e.ID, e.Type, e.Source, e.Aggregate, e.AggregateID
		topics[i], times[i], datas[i], traces[i] = e.Topic, e.Time, e.Data, e.TraceParent
	}
	args := []any{namespace, ids, types, sources, aggs, aggIDs, topics, times, datas, traces}
	if probe != nil {
		args = append(args, probe)
	}
	args = append(args, voucher(evs))
	var xid uint64
	var err error
	if query == "Append" {
		err = store.ScanGeneric(ctx, tx, []any{&xid}, queries.Get(query), args...)
	} else { // AppendFromBus probes the log for each id: custom plans, as everything that reads
		err = tx.QueryRow(ctx, queries.Get(query), args...).Scan(&xid)
	}
	if err != nil {
		return 0, fmt.Errorf("appending %d events to the log: %w", n, err)
	}
	return xid, nil
}

// voucher is the source of the node that can vouch for a transaction of evs (outbox_txs.source):
// the one source of its events to publish, empty when they have several (no node vouches then,
// and the sweep publishes them).
func voucher(evs []events.Event) string {
	source := ""
	for _, e := range evs {
		switch {
		case e.Topic == "":
		case source == "":
			source = e.Source
		case e.Source != source:
			return ""
		}
	}
	return source
}

// enqueue hands committed events with a topic to the publisher without waiting. When there are
// none, or one was written by another source (this node can vouch only for its own), pt ends
// here; a batch that cannot be queued keeps pt pending for the sweep.
func (o *Outbox) enqueue(ctx context.Context, evs []events.Event, pt *pendingTx) {
	var pub []events.Event
	own := events.Source(o.cfg.Namespace, o.cfg.InstanceID)
	for _, e := range evs {
		if e.Topic != "" { // a completion recorded from the bus is already on it
			pub = append(pub, e)
			if e.Source != own {
				pt = nil
			}
		}
	}
	if len(pub) == 0 {
		if pt != nil {
			o.pub.done(pt)
		}
		return
	}
	select {
	case o.queue <- queued{evs: pub, tx: pt}:
	default:
		o.cfg.Logger.WarnContext(ctx, "the publish queue is full (NATS slow or unreachable); the outbox sweep will publish these events",
			slog.Int("events", len(pub)))
	}
}

// Run publishes queued events and sweeps until ctx is cancelled.
func (o *Outbox) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.runPublisher(ctx)
	}()
	defer func() { <-done }()
	t := time.NewTicker(o.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for {
			_, passed, err := o.sweepOnce(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				o.cfg.Logger.WarnContext(ctx, "outbox sweep failed; will retry", slog.Any("error", err))
				break
			}
			if passed < o.cfg.SweepBatch {
				break // caught up (or at a row still young)
			}
		}
	}
}

// runPublisher publishes queued batches until ctx is cancelled.
func (o *Outbox) runPublisher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-o.queue:
			if o.publishQueued(ctx, q.evs) && q.tx != nil {
				o.pub.done(q.tx)
			}
		}
	}
}

// publishQueued publishes one committed batch, retrying with back-off until JetStream has
// stored every event (true) or the node stops (false: then the sweep publishes them).
// Publishing again is safe: Nats-Msg-Id makes JetStream drop what it already has.
func (o *Outbox) publishQueued(ctx context.Context, evs []events.Event) bool {
	for attempt := 1; ; attempt++ {
		err := o.publish(ctx, evs)
		if err == nil {
			if attempt > 1 {
				o.cfg.Logger.InfoContext(ctx, "published committed events after retrying", slog.Int("events", len(evs)),
					slog.Int("attempts", attempt))
			}
			o.TestSignals.Published.Signal(len(evs))
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if attempt == 1 {
			o.cfg.Logger.WarnContext(ctx, "publishing committed events failed; retrying (if this node stops first, the outbox sweep publishes them)",
				slog.Int("events", len(evs)), slog.Any("error", err))
		}
		t := time.NewTimer(retry.Delay(attempt, 100*time.Millisecond, 5*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// tracer makes the publish spans.
var tracer = telemetry.Tracer("outbox")

// publish publishes the events of transactions and waits until JetStream stored (or
// de-duplicated) each one. A transaction's events of the EVENTS stream go in batches
// (events.Batches, at most EventBatch a message, in log order; never two transactions' in one),
// so the sweep, publishing what a node did not, forms the batches that node did, under the same
// ids; so do its JobFired for each job type, at most FireBatch a message. An event with trace
// context gets an "agate.publish" span in its trace (a JobFired's: a child of its fire span),
// from the publish to JetStream's acknowledgement; the message carries the event's own trace
// context, not the publish span's, so that a consumer's span is a child of the step that made
// the event, whichever node or sweep published it.
func (o *Outbox) publish(ctx context.Context, txs ...[]events.Event) error {
	if o.js == nil {
		return errors.New("no JetStream connection")
	}
	var msgs [][]events.Event
	limit := events.BatchLimit(o.js.Conn())
	self := func(e events.Event) events.Event { return e }
	for _, evs := range txs {
		var evt, fired []events.Event
		for i, e := range evs {
			switch {
			case e.Topic == "":
			case o.cfg.EventBatch > 1 && strings.HasPrefix(e.Topic, o.evtPrefix):
				evt = append(evt, e)
			case o.cfg.FireBatch > 1 && strings.HasPrefix(e.Topic, o.firedPrefix):
				fired = append(fired, e)
			default:
				msgs = append(msgs, evs[i:i+1])
			}
		}
		if len(evt) > 0 {
			msgs = append(msgs, events.Batches(evt, self, o.cfg.EventBatch, limit)...)
		}
		if len(fired) > 0 {
			msgs = append(msgs, events.Batches(fired, self, o.cfg.FireBatch, limit)...)
		}
	}
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	spans := make([][]trace.Span, 0, len(msgs)) // each message's events' spans, nil when none is traced
	for _, m := range msgs {
		var msg *nats.Msg
		var err error
		if len(m) == 1 {
			msg, err = events.Message(m[0])
		} else {
			msg, err = events.BatchMessage(events.BatchID(m), m)
		}
		if err != nil {
			endSpans(spans, err)
			return err
		}
		spans = append(spans, publishSpans(ctx, m))
		f, err := o.js.PublishMsgAsync(msg)
		if err != nil {
			err = fmt.Errorf("publishing %d events to %s: %w", len(m), msg.Subject, err)
			endSpans(spans, err)
			return err
		}
		futures = append(futures, f)
	}
	var errs []error
	for i, f := range futures {
		var err error
		select {
		case <-f.Ok():
		case err = <-f.Err():
			err = fmt.Errorf("publishing to %s: %w", f.Msg().Subject, err)
			errs = append(errs, err)
		case <-ctx.Done():
			endSpans(spans[i:], ctx.Err())
			return ctx.Err()
		}
		endSpans(spans[i:i+1], err)
	}
	return errors.Join(errs...)
}

// publishSpans starts the publish spans of the events of one message, nil when none has trace
// context or nothing records.
func publishSpans(ctx context.Context, evs []events.Event) []trace.Span {
	var spans []trace.Span
	for i, e := range evs {
		if s := publishSpan(ctx, e); s != nil {
			if spans == nil {
				spans = make([]trace.Span, len(evs))
			}
			spans[i] = s
		}
	}
	return spans
}

// publishSpan starts the publish span of e, nil when e has no trace context or nothing records.
func publishSpan(ctx context.Context, e events.Event) trace.Span {
	if e.TraceParent == "" {
		return nil
	}
	_, span := tracer.Start(telemetry.WithTraceParent(ctx, e.TraceParent), "agate.publish",
		trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return nil
	}
	span.SetAttributes(telemetry.Messaging(telemetry.OpPublish, e.Topic)...)
	span.SetAttributes(attribute.String("messaging.message.id", e.ID.String()), attribute.String("agate.event.type", e.Type))
	return span
}

// endSpans ends the spans of messages that are not nil, with err as their status when not nil.
func endSpans(msgs [][]trace.Span, err error) {
	for _, spans := range msgs {
		for _, s := range spans {
			if s == nil {
				continue
			}
			if err != nil {
				s.SetStatus(codes.Error, err.Error())
			}
			s.End()
		}
	}
}

// SweepOnce publishes the events of one batch after the cursor that no live node vouches for
// and that are older than SweepDelay, then advances the cursor. It returns how many it
// published (0 when another node holds the cursor).
func (o *Outbox) SweepOnce(ctx context.Context) (int, error) {
	published, _, err := o.sweepOnce(ctx)
	return published, err
}

// sweepOnce is SweepOnce; it also returns how many transactions the cursor passed.
func (o *Outbox) sweepOnce(ctx context.Context) (published, passed int, err error) {
	err = store.InTx(ctx, o.pool, func(tx pgx.Tx) error {
		var lastXID string
		var lastSeq int64
		err := tx.QueryRow(ctx, queries.Get("LockCursor"), o.cfg.Namespace).Scan(&lastXID, &lastSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // another node is sweeping
		}
		if err != nil {
			return fmt.Errorf("reading outbox cursor: %w", err)
		}
		todo, xid, n, err := o.unvouched(ctx, tx, lastXID, lastSeq)
		if err != nil || xid == "" {
			return err
		}
		txs, err := o.eventsOf(ctx, tx, todo, lastXID, lastSeq)
		if err != nil {
			return err
		}
		if len(txs) > 0 {
			if err := o.publish(ctx, txs...); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, queries.Get("AdvanceCursor"), o.cfg.Namespace, xid, int64(math.MaxInt64)); err != nil {
			return fmt.Errorf("advancing outbox cursor: %w", err)
		}
		if _, err := tx.Exec(ctx, queries.Get("ForgetTxs"), o.cfg.Namespace, xid); err != nil {
			return fmt.Errorf("forgetting the transactions the outbox cursor passed: %w", err)
		}
		for _, evs := range txs {
			published += len(evs)
		}
		passed = n
		return nil
	})
	if err == nil {
		o.TestSignals.Swept.Signal(published)
	}
	return published, passed, err
}

// sweptTxs are the transactions a sweep pass publishes: their xids (as text) and the seqs their
// events to publish span, one element each.
type sweptTxs struct {
	xids           []string
	seqFrom, seqTo []int64
}

// unvouched reads the transactions after the cursor, up to the first one not vouched for that is
// younger than SweepDelay: it returns those not vouched for (at most about SweepBatch events in
// all), the xid of the last transaction passed ("" when none) and how many it passed.
func (o *Outbox) unvouched(ctx context.Context, tx pgx.Tx, lastXID string, lastSeq int64) (todo sweptTxs, xid string, passed int, err error) {
	rows, err := tx.Query(ctx, queries.Get("SweepTxs"), o.cfg.Namespace, lastXID, lastSeq, o.cfg.SweepBatch)
	if err != nil {
		return todo, "", 0, fmt.Errorf("reading outbox: %w", err)
	}
	defer rows.Close()
	cutoff := time.Now().Add(-o.cfg.SweepDelay)
	events := 0 // to publish
	for rows.Next() {
		var rowXID string
		var n int
		var unvouched bool
		var at time.Time
		var seqFrom, seqTo int64
		if err := rows.Scan(&rowXID, &n, &unvouched, &at, &seqFrom, &seqTo); err != nil {
			return todo, "", 0, fmt.Errorf("reading outbox row: %w", err)
		}
		if unvouched {
			if at.After(cutoff) || (events > 0 && events+n > o.cfg.SweepBatch) {
				break // its own node is publishing it; or enough for one pass
			}
			todo.xids = append(todo.xids, rowXID)
			todo.seqFrom, todo.seqTo = append(todo.seqFrom, seqFrom), append(todo.seqTo, seqTo)
			events += n
		}
		xid = rowXID
		passed++
	}
	if err := rows.Err(); err != nil {
		return todo, "", 0, fmt.Errorf("reading outbox: %w", err)
	}
	return todo, xid, passed, nil
}

// eventsOf reads the events to publish of the transactions txs, after the cursor, in log
// order: a slice per transaction.
func (o *Outbox) eventsOf(ctx context.Context, tx pgx.Tx, txs sweptTxs, lastXID string, lastSeq int64) ([][]events.Event, error) {
	if len(txs.xids) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, queries.Get("SweepEvents"), txs.xids, txs.seqFrom, txs.seqTo, lastXID, lastSeq)
	if err != nil {
		return nil, fmt.Errorf("reading outbox events: %w", err)
	}
	defer rows.Close()
	var out [][]events.Event
	var txXID string // the transaction of out's last
	for rows.Next() {
		var rowXID string
		var e events.Event
		if err := rows.Scan(&rowXID, &e.ID, &e.Type, &e.Source, &e.Aggregate, &e.AggregateID, &e.Topic, &e.Time, &e.Data,
			&e.TraceParent); err != nil {
			return nil, fmt.Errorf("reading outbox event: %w", err)
		}
		e.Subject = e.AggregateID
		if len(out) == 0 || rowXID != txXID {
			out, txXID = append(out, nil), rowXID
		}
		out[len(out)-1] = append(out[len(out)-1], e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading outbox events: %w", err)
	}
	return out, nil
}
