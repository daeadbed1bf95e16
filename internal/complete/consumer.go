package complete

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/testsignal"
	"github.com/agatesched/agate/internal/wake"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	BatchDefault   = 500
	MaxWaitDefault = 50 * time.Millisecond
	YieldDefault   = 6 * time.Second
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
	// Wake is notified after triggers went back to WAITING.
	Wake *wake.Signal
	// Backlogged reports whether the node's fire path is behind: more triggers due than its
	// acquire loop fires in a pass (acquire.Acquirer.Backlogged). Meanwhile the consumer waits
	// before it takes the next batch, up to Yield, so that completions do not take cores and
	// partition locks from fires that are due: nothing a worker or a producer waits for
	// depends on them, except a non-concurrent job's next fire. Nil: never behind.
	Backlogged func() bool
	// FiresWaiting reports whether a batch of fires or more waits for a worker
	// (pending.Waiting): the consumer waits as while Backlogged, so that completions do not
	// take the cores of jobs waiting to run. It is asked only while the consumer waits or after
	// a fetch that came back full (completions arriving faster than the consumer applies
	// them), so that a steady flow costs JetStream no request. Nil: never.
	FiresWaiting func() bool
	// Yield is the longest the consumer waits while Backlogged; then it applies batches until
	// it has caught up, and may wait again. Default 6s: a burst of 20,000 on 4 nodes fires for
	// 4–6 s on two cores, and with 3s its completions were applied during the last seconds of
	// fires, up to 6,157 of them, taking the cores those fires needed (docs/performance-history.md).
	Yield time.Duration
	// Heavy reports whether the node fires a heavy flow (acquire.Acquirer.Heavy). Meanwhile the
	// outcomes whose recording takes partition locks (a one-shot's end deletes its trigger and
	// job; a non-concurrent job's releases its triggers) are held back, up to Yield (holding),
	// while those of repeating triggers are recorded at once: the acquire passes skip a held
	// partition, and completions taking them in turn made fires late. Nil: never heavy.
	Heavy func() bool
}

// Consumer applies completion messages in batches.
//
// It uses nats.go's jetstream package directly rather than a watermill router: a batch of
// messages is applied in one transaction and acked together after commit, which watermill's
// one-message-at-a-time handlers cannot express.
type Consumer struct {
	cfg    Config
	outbox *outbox.Outbox
	js     jetstream.JetStream
	origin events.Origin
	tracer trace.Tracer

	metrics metrics

	// held are received outcomes waiting to be recorded under partition locks (Config.Heavy),
	// since heldSince; only Run's goroutine touches them.
	held      []pending
	heldSince time.Time
	// lockHeld are the partitions found held by another transaction for store.HeldWait: their
	// outcomes wait in held while the others' are recorded.
	lockHeld store.HeldPartitions

	TestSignals TestSignals
}

// pending is a received completion message: its outcome, and its span in the job's trace, from
// receipt until the outcome is recorded.
type pending struct {
	out  Outcome
	msg  jetstream.Msg
	span trace.Span
}

// TestSignals tell tests what the consumer did.
type TestSignals struct {
	Applied testsignal.Signal[Applied] // a batch of outcomes was recorded
}

// New builds a Consumer.
func New(cfg Config, ob *outbox.Outbox, js jetstream.JetStream) *Consumer {
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.MaxWait = cmp.Or(cfg.MaxWait, MaxWaitDefault)
	cfg.Yield = cmp.Or(cfg.Yield, YieldDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Consumer{cfg: cfg, outbox: ob, js: js, origin: events.Origin{Namespace: cfg.Namespace, InstanceID: cfg.InstanceID},
		tracer: telemetry.Tracer("complete"), metrics: newMetrics(nil)}
}

// DurableName is the shared durable consumer of all scheduler nodes on the DONE stream.
const DurableName = "scheduler-done"

// Run consumes until ctx is cancelled.
func (c *Consumer) Run(ctx context.Context) error {
	// NATS may be restarting as the node starts: wait for it rather than stop the node.
	var cons jetstream.Consumer
	err := retry.Do(ctx, c.cfg.Logger, "creating the completion consumer", natsconn.NotAnswering, func() error {
		var err error
		cons, err = c.js.CreateOrUpdateConsumer(ctx, events.StreamDone(c.cfg.Namespace), jetstream.ConsumerConfig{
			Durable:       DurableName,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxAckPending: 2 * heldBatches * c.cfg.Batch,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("creating completion consumer: %w", err)
	}
	defer c.giveBack()
	full := false // the last fetch came back with a whole batch
	budget := c.fetchBytes()
	y := &yielder{max: c.cfg.Yield}
	y.backlogged = func() bool { return c.behind(full || y.waiting()) }
	for ctx.Err() == nil {
		c.flush(ctx)
		if d := y.wait(time.Now()); d > 0 {
			sleep(ctx, d)
			continue
		}
		batch, err := cons.Fetch(c.cfg.Batch, jetstream.FetchMaxWait(c.cfg.MaxWait), jetstream.FetchMaxBytes(budget))
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
		outcomes := c.handle(ctx, msgs)
		full = len(msgs) == c.cfg.Batch || outcomes >= c.cfg.Batch
		if !full {
			y.caughtUp()
		}
	}
	return nil
}

// fetchBytes bounds the bytes of one fetch, whose messages may hold many outcomes each (a
// worker's batch): about the largest message the server takes, so that the outcomes in hand
// stay about a megabyte, whatever the workers' batches (1,100–1,400 outcomes; a batch of 500
// single outcomes is under it). Never less than the largest message: the server would refuse
// a message larger than a fetch's budget, for ever.
func (c *Consumer) fetchBytes() int {
	largest := 1 << 20 // nats-server's default max_payload, when not connected yet
	if c.js != nil && c.js.Conn().MaxPayload() > 0 {
		largest = int(c.js.Conn().MaxPayload())
	}
	return max(largest+fetchOverhead, c.cfg.Batch*1024)
}

// fetchOverhead is room in a fetch's byte budget for a message's subject and reply subject,
// on top of its payload and headers (which count against the server's max_payload).
const fetchOverhead = 4 << 10

// behind reports whether fires are behind (Config.Backlogged, and Config.FiresWaiting when
// busy: the consumer waits, or its last fetch came back full): the consumer then yields. A
// burst's acquire passes report a backlog on and off; asked only after full fetches, the
// fires waiting let a batch of completions through at each pass without one, and the bursts
// were 6–11 % slower end to end.
func (c *Consumer) behind(busy bool) bool {
	if c.cfg.Backlogged != nil && c.cfg.Backlogged() {
		return true
	}
	return busy && c.cfg.FiresWaiting != nil && c.cfg.FiresWaiting()
}

// yieldPoll is how often a yielding consumer looks whether the backlog is gone.
const yieldPoll = 5 * time.Millisecond

// yielder decides when the consumer yields to the fire path (Config.Backlogged). A burst of
// 20,000 one-shots due at once on 2 nodes, the completions applied mostly after the fires rather
// than between them, three pairs of runs interleaved: e2e 7,594–9,044/s against 6,764–8,030,
// fires 9,595–13,480/s against 9,585–10,700, the same CPU in all (docs/performance-history.md).
type yielder struct {
	backlogged func() bool
	max        time.Duration
	since      time.Time // when the current wait began; zero while not waiting
	spent      bool      // the wait reached max: apply batches until caught up
}

// wait returns how long to wait before the next fetch: 0 to fetch now.
func (y *yielder) wait(now time.Time) time.Duration {
	if y.backlogged == nil || !y.backlogged() {
		y.since, y.spent = time.Time{}, false
		return 0
	}
	if y.spent {
		return 0
	}
	if y.since.IsZero() {
		y.since = now
	}
	left := y.max - now.Sub(y.since)
	if left <= 0 {
		y.spent = true
		return 0
	}
	return min(left, yieldPoll)
}

// waiting reports whether the consumer is waiting out a backlog.
func (y *yielder) waiting() bool { return !y.since.IsZero() }

// caughtUp says a fetch returned less than a full batch: the next backlog may be waited out again.
func (y *yielder) caughtUp() { y.since, y.spent = time.Time{}, false }

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

// handle decodes msgs, records at once the outcomes that need no partition lock (Apply), and
// holds back the others for flush. It returns how many outcomes the messages held.
func (c *Consumer) handle(ctx context.Context, msgs []jetstream.Msg) int {
	ps := make([]pending, 0, len(msgs))
	for _, m := range msgs {
		ps = c.decodeAll(ctx, m, ps)
	}
	if len(ps) == 0 {
		return 0
	}
	for i := range ps {
		ps[i].span = c.startSpan(ctx, ps[i].out, ps[i].msg, len(ps))
	}
	rest := c.record(ctx, ps, c.applyUnlocked)
	if len(rest) > 0 && len(c.held) == 0 {
		c.heldSince = time.Now()
	}
	c.held = append(c.held, rest...) // Run's loop flushes them when they have waited enough
	return len(ps)
}

// decodeAll appends to ps the outcomes m holds: one, or each of a worker's batch
// (events.BatchMessage), which share m through an events.Share when there are several. Garbage
// cannot become valid by redelivery: it is logged and dropped, a batch's valid outcomes
// recorded all the same.
func (c *Consumer) decodeAll(ctx context.Context, m jetstream.Msg, ps []pending) []pending {
	drop := func(err error) {
		c.cfg.Logger.ErrorContext(ctx, "dropping malformed completion message",
			slog.String("subject", m.Subject()), slog.Any("error", err))
	}
	bodies, err := events.Bodies(m.Headers(), m.Data())
	if err != nil {
		drop(err)
		_ = m.Term()
		return ps
	}
	outs := make([]Outcome, 0, len(bodies))
	for i, b := range bodies {
		o, err := decode(m, b)
		if err != nil && len(bodies) > 1 {
			err = fmt.Errorf("outcome %d of %d in a batch: %w", i+1, len(bodies), err)
		}
		if err != nil {
			drop(err)
			continue
		}
		outs = append(outs, o)
	}
	var msg jetstream.Msg = m
	switch {
	case len(outs) == 0:
		_ = m.Term()
		return ps
	case len(outs) > 1:
		msg = events.NewShare(m, len(outs))
	}
	for _, o := range outs {
		ps = append(ps, pending{out: o, msg: msg})
	}
	return ps
}

// flush records the held outcomes under their partitions' locks, unless they wait longer
// (holding). They go in a transaction per lock partition of their jobs, several at once. One
// transaction for a whole batch took every partition its jobs hash to (all of them, in a
// burst), in order, waiting for each: fire transactions queued behind it, and two nodes'
// batches behind each other. A small batch (store.SmallBatch, a steady flow's) goes in one
// transaction all the same. The outcomes of a partition that another transaction held longer
// than store.HeldWait stay held, to be tried again after it.
func (c *Consumer) flush(ctx context.Context) {
	now := time.Now()
	if len(c.held) == 0 || c.holding(now) {
		return
	}
	held, since := c.held, c.heldSince
	c.held, c.heldSince = nil, time.Time{}
	var mu sync.Mutex // guards rest
	var rest []pending
	groups := map[int][]pending{}
	for _, pe := range held {
		j := pe.out.Result.Job.Key()
		p := c.cfg.Locks.PartitionOf(j.Group, j.Name)
		switch {
		case c.lockHeld.Held(p, now):
			rest = append(rest, pe)
			continue
		case len(held) <= store.SmallBatch:
			p = 0 // applyLocked takes the partitions of all their jobs, in ascending order
		}
		groups[p] = append(groups[p], pe)
	}
	locked := func(ctx context.Context, outs []Outcome) (Applied, []int, error) {
		applied, err := c.applyLocked(ctx, outs, store.HeldWait)
		var lockHeld *store.PartitionHeldError
		if errors.As(err, &lockHeld) {
			if heldFor, warn := c.lockHeld.Hold(lockHeld.Partition, time.Now()); warn {
				c.cfg.Logger.WarnContext(ctx, "a lock partition has been held by another transaction for a while (a node stopped in the middle of one?); its completions wait, the others are recorded",
					slog.Int("partition", lockHeld.Partition), slog.Duration("held_for", heldFor.Round(time.Millisecond)))
			}
			all := make([]int, len(outs))
			for i := range all {
				all[i] = i
			}
			return Applied{}, all, nil
		}
		return applied, nil, err
	}
	var g errgroup.Group
	g.SetLimit(c.cfg.Locks.Concurrency())
	for _, gr := range groups {
		g.Go(func() error {
			left := c.record(ctx, gr, locked)
			mu.Lock()
			rest = append(rest, left...)
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait() // each group's outcome is handled in record
	if len(rest) > 0 {
		c.held, c.heldSince = rest, since
	}
}

// holding reports whether the held outcomes wait longer: while the node fires a heavy flow,
// until they have waited Yield or are heldBatches batches (half of what JetStream hands the
// consumer unacknowledged, MaxAckPending). Held until a batch, a steady 5,000/s whose
// triggers all ended in its last second recorded their ends every 100 ms, and its fires in
// that second were as late as without holding (p99 about 100 ms).
func (c *Consumer) holding(now time.Time) bool {
	return c.cfg.Heavy != nil && c.cfg.Heavy() && len(c.held) < heldBatches*c.cfg.Batch && now.Sub(c.heldSince) < c.cfg.Yield
}

// heldBatches is how many batches of outcomes the consumer holds at most (Config.Heavy).
const heldBatches = 10

// giveBack hands the held outcomes back to JetStream for redelivery, when the consumer stops.
func (c *Consumer) giveBack() {
	for _, pe := range c.held {
		_ = pe.msg.Nak()
		pe.span.End()
	}
	c.held = nil
}

// startSpan starts the span of one completion, a child of the worker's run span (the outcome's
// traceparent), so in the fire's trace.
func (c *Consumer) startSpan(ctx context.Context, o Outcome, m jetstream.Msg, batch int) trace.Span {
	_, span := c.tracer.Start(telemetry.WithTraceParent(ctx, o.Event.TraceParent), "agate.complete",
		trace.WithSpanKind(trace.SpanKindConsumer))
	if span.IsRecording() {
		span.SetAttributes(telemetry.Messaging(telemetry.OpProcess, m.Subject())...)
		span.SetAttributes(telemetry.DBPostgres,
			attribute.String("agate.namespace", c.cfg.Namespace),
			attribute.String("agate.fire_id", o.Result.FireID.String()),
			attribute.String("agate.job", o.Result.Job.Key().String()),
			attribute.String("agate.trigger", o.Result.Trigger.String()),
			attribute.String("agate.outcome", o.Type),
			attribute.Int("agate.batch", batch))
	}
	return span
}

// record records the outcomes of ps with apply, which returns the indexes of those it left;
// it acks the messages of the others after the commit, and ends their spans. When apply fails
// every message is handed back for redelivery. It returns what apply left.
func (c *Consumer) record(ctx context.Context, ps []pending, apply func(context.Context, []Outcome) (Applied, []int, error)) []pending {
	outs := make([]Outcome, len(ps))
	for i, pe := range ps {
		outs[i] = pe.out
	}
	applied, left, err := apply(ctx, outs)
	if err != nil {
		c.cfg.Logger.WarnContext(ctx, "applying completions failed; they will be redelivered",
			slog.Int("completions", len(ps)), slog.Any("error", err))
		for _, pe := range ps {
			pe.span.SetStatus(codes.Error, err.Error())
			pe.span.End()
			_ = pe.msg.NakWithDelay(time.Second)
		}
		return nil
	}
	kept := make([]bool, len(ps))
	rest := make([]pending, 0, len(left))
	for _, i := range left {
		kept[i] = true
		rest = append(rest, ps[i])
	}
	for i, pe := range ps {
		if !kept[i] {
			pe.span.End()
			_ = pe.msg.Ack()
		}
	}
	if applied != (Applied{}) {
		c.TestSignals.Applied.Signal(applied)
	}
	return rest
}

// decode reads one outcome's envelope, body, of message m. Its trace context is the envelope's
// (an element of a batch) or the message's headers.
func decode(m jetstream.Msg, body []byte) (Outcome, error) {
	var o Outcome
	env, err := events.DecodeRaw(body, &o.Result)
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
		TraceParent: cmp.Or(env.TraceParent, m.Headers().Get("traceparent")),
	}
	return o, nil
}

// outcome is the outcome attribute of the completions counter for o.
func (o Outcome) outcome() string {
	switch {
	case o.Type == events.TypeJobCompleted:
		return outcomeCompleted
	case o.Result.Error != nil && o.Result.Error.Final:
		return outcomeFailedFinal
	default:
		return outcomeFailed
	}
}

// lastOrBlocking reports whether the outcome's fire left its trigger COMPLETE (a one-shot's, a
// last fire) or BLOCKED (a non-concurrent job's), as the worker echoed JobFired.triggerState:
// the end of such an execution is never a repeating trigger's that EndRepeating ends, so it
// goes straight to the locked path. In a burst of one-shots, looking for them there first read
// 8 % of the burst's buffers and found nothing. A wrong or missing state only costs that look.
func (o Outcome) lastOrBlocking() bool {
	s := o.Result.TriggerState
	return s == store.StateComplete || s == store.StateBlocked
}

// ends reports whether an outcome ends the fire's execution.
func (o Outcome) ends() bool {
	return o.Type == events.TypeJobCompleted || (o.Result.Error != nil && o.Result.Error.Final)
}

// storeData stores the job data that completed runs handed back on their jobs, those that
// persist their data (Quartz's PersistJobDataAfterExecution), once per execution. Data that is
// not a JSON object, or that PostgreSQL cannot store, is dropped with a warning: the completion
// itself must not fail because of it.
func (c *Consumer) storeData(ctx context.Context, tx *outbox.Tx, outs []Outcome, ended map[uuid.UUID]store.Ended) error {
	var g, n, data []string
	for _, o := range outs {
		d := o.Result.Data
		if _, ok := ended[o.Result.FireID]; !ok || o.Type != events.TypeJobCompleted || len(d) == 0 {
			continue
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d, &obj); err != nil || obj == nil || store.JSONHasNUL(d) {
			c.cfg.Logger.WarnContext(ctx, "ignoring the job data a run handed back: not a JSON object PostgreSQL can store",
				slog.String("job", o.Result.Job.Key().String()), slog.String("fire_id", o.Result.FireID.String()))
			continue
		}
		g, n, data = append(g, o.Result.Job.Group), append(n, o.Result.Job.Name), append(data, string(d))
	}
	if len(g) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, queries.Get("StoreJobData"), c.cfg.Namespace, g, n, data); err != nil {
		return fmt.Errorf("storing job data handed back by runs: %w", err)
	}
	return nil
}

// Applied says what Apply did.
type Applied struct {
	Ended    int // executions ended: their fired rows deleted
	Released int // blocked triggers released
	Ignored  int // ending outcomes of executions that had already ended
}

// Apply records outcomes: the fired rows of ended executions go, the triggers their
// non-concurrent jobs blocked are released, finished triggers and jobs left without triggers
// are deleted, and each outcome is logged once. The executions of repeating triggers of
// concurrent jobs, which change nothing but their fired row, end in a transaction without the
// partition locks (store.EndRepeating); the rest in one under the locks of their jobs'
// partitions, as Quartz's triggeredJobComplete runs under TRIGGER_ACCESS.
func (c *Consumer) Apply(ctx context.Context, outs []Outcome) (Applied, error) {
	if len(outs) == 0 {
		return Applied{}, nil
	}
	res, left, err := c.applyUnlocked(ctx, outs)
	if err != nil || len(left) == 0 {
		return res, err
	}
	rest := make([]Outcome, len(left))
	for i, j := range left {
		rest[i] = outs[j]
	}
	more, err := c.applyLocked(ctx, rest, 0)
	if err != nil {
		return Applied{}, err
	}
	res.Ended, res.Released, res.Ignored = res.Ended+more.Ended, res.Released+more.Released, res.Ignored+more.Ignored
	return res, nil
}

// applyUnlocked ends, without partition locks, the executions whose end may change nothing but
// their fired row, and logs the outcomes that ended them. It returns the indexes of the
// outcomes left for applyLocked, in order: those of executions it did not end; outcomes that do
// not end an execution, hand back job data, or come from a fire that left its trigger COMPLETE
// or BLOCKED (lastOrBlocking); and every outcome of a fire that has one of those, or several in
// the batch, so that a fire's outcomes are logged in the order they came.
func (c *Consumer) applyUnlocked(ctx context.Context, outs []Outcome) (Applied, []int, error) {
	seen := make(map[uuid.UUID]int, len(outs))
	locked := map[uuid.UUID]bool{}
	for _, o := range outs {
		id := o.Result.FireID
		seen[id]++
		if !o.ends() || len(o.Result.Data) > 0 || o.lastOrBlocking() || seen[id] > 1 {
			locked[id] = true
		}
	}
	var ids []uuid.UUID
	for _, o := range outs {
		if !locked[o.Result.FireID] {
			ids = append(ids, o.Result.FireID)
		}
	}
	if len(ids) == 0 {
		left := make([]int, len(outs))
		for i := range left {
			left[i] = i
		}
		return Applied{}, left, nil
	}
	var ended map[uuid.UUID]store.Ended
	err := c.outbox.InHotTx(ctx, func(tx *outbox.Tx) error {
		var err error
		if ended, err = store.EndRepeating(ctx, tx, ids); err != nil {
			return err
		}
		counts := map[string]int64{}
		for _, o := range outs {
			if _, ok := ended[o.Result.FireID]; ok {
				tx.Append(o.Event) // new to the log: it is logged only with the end of its execution
				counts[o.outcome()]++
			}
		}
		tx.OnCommit(func() { c.metrics.recorded(ctx, counts) })
		return nil
	})
	if err != nil {
		return Applied{}, nil, fmt.Errorf("recording %d completions: %w", len(ids), err)
	}
	var left []int
	for i, o := range outs {
		if _, ok := ended[o.Result.FireID]; !ok {
			left = append(left, i)
		}
	}
	return Applied{Ended: len(ended)}, left, nil
}

// applyLocked applies outs in one transaction under the locks of their jobs' partitions, waiting
// at most wait for each (store.Locks.WaitPartitionsAsMember; 0: as long as it takes).
func (c *Consumer) applyLocked(ctx context.Context, outs []Outcome, wait time.Duration) (Applied, error) {
	var res Applied
	err := c.outbox.InHotTx(ctx, func(tx *outbox.Tx) error {
		res = Applied{}
		jobs := make([]events.Key, len(outs))
		for i, o := range outs {
			jobs[i] = o.Result.Job.Key()
		}
		ps := c.cfg.Locks.PartitionsOfJobs(jobs)
		if _, err := c.cfg.Locks.WaitPartitionsAsMember(ctx, tx, ps, "", nil, wait); err != nil {
			return err
		}
		tx.OnCommit(func() { c.lockHeld.Taken(ps...) })
		var ids []uuid.UUID
		for _, o := range outs {
			if o.ends() {
				ids = append(ids, o.Result.FireID)
			}
		}
		end, err := store.EndExecutions(ctx, tx, c.origin, ids, time.Now())
		if err != nil {
			return err
		}
		ended := end.Ended
		if err := c.storeData(ctx, tx, outs, ended); err != nil {
			return err
		}
		// An execution ends once: a second ending outcome for a fire whose row is already gone
		// (a redelivered or re-run completion), or that another outcome of the batch ended, is
		// not recorded again. The one that ended it is new to the log, which records an ending
		// outcome only with the end of its execution; any other outcome may be a redelivery.
		counts := map[string]int64{}
		logged := make(map[uuid.UUID]bool, len(ended))
		for _, o := range outs {
			switch _, ok := ended[o.Result.FireID]; {
			case o.ends() && ok && !logged[o.Result.FireID]:
				logged[o.Result.FireID] = true
				tx.Append(o.Event)
			case o.ends():
				res.Ignored++
				counts[outcomeDuplicate]++
				continue
			default:
				tx.AppendFromBus(o.Event)
			}
			counts[o.outcome()]++
		}
		tx.Append(end.Events...)
		res.Ended, res.Released = len(ended), end.Released
		tx.OnCommit(func() { c.metrics.recorded(ctx, counts) })
		return nil
	})
	if err != nil {
		return Applied{}, fmt.Errorf("recording %d completions: %w", len(outs), err)
	}
	if res.Released > 0 {
		c.cfg.Wake.Notify()
	}
	return res, nil
}
