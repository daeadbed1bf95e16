package fire

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/trigger"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Config configures a Firer.
type Config struct {
	Namespace  string
	InstanceID string
	Logger     *slog.Logger
	// Now is the node clock; tests inject one.
	Now func() time.Time
	// TracerProvider makes the fire spans; nil: the global one (see internal/telemetry).
	TracerProvider trace.TracerProvider
}

// Firer is the fire transaction: it fires claims inside a transaction that holds their lock
// partition.
type Firer struct {
	cfg     Config
	origin  events.Origin
	tracer  trace.Tracer
	metrics metrics
}

// New builds a Firer.
func New(cfg Config) *Firer {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tracer := telemetry.Tracer("fire")
	if cfg.TracerProvider != nil {
		tracer = cfg.TracerProvider.Tracer(telemetry.InstrumentationName("fire"))
	}
	return &Firer{cfg: cfg, origin: events.Origin{Namespace: cfg.Namespace, InstanceID: cfg.InstanceID},
		tracer: tracer, metrics: newMetrics(nil)}
}

// firing is one claim that passed its checks, with its trigger advanced.
type firing struct {
	claim store.Claim
	row   *store.FireRow
	trig  *trigger.Trigger
	state string // the trigger's state after the fire
}

// drop is a claim that is not fired, and why (an events.Drop… reason). held says this
// transaction holds the claim's fired row (it marked it EXECUTING), so dropping deletes it; a
// claim whose row it could not mark leaves the row to whoever has it.
type drop struct {
	claim  store.Claim
	reason string
	held   bool
}

// Fire fires claims inside tx, which holds the claims' lock partition: each claim's trigger
// advances (Quartz's triggered()), its fired row becomes EXECUTING, and a JobFired event goes
// into the log. It returns how many claims fired.
//
// Every write is guarded and its row count checked, so that even a transaction that lost its
// lock cannot fire a (trigger, time) twice: a claim made ahead fires only while its own fired
// row (keyed by its fire id) is still ACQUIRED, and a trigger advances only from the state and
// next fire time the claim was made on. A claim that fails a guard is dropped with a
// ClaimDropped event; a trigger whose schedule can no longer be computed is put in ERROR with a
// TriggerError event instead of failing the transaction and stalling its partition.
func (f *Firer) Fire(ctx context.Context, tx *outbox.Tx, claims []store.Claim) (int, error) {
	n, _, err := f.FireNext(ctx, tx, claims)
	return n, err
}

// FireNext is Fire; it also returns the earliest next fire time of the fired triggers (zero
// when none fires again), for the acquire loop to plan by.
func (f *Firer) FireNext(ctx context.Context, tx *outbox.Tx, claims []store.Claim) (fired int, next time.Time, err error) {
	if len(claims) == 0 {
		return 0, time.Time{}, nil
	}
	now, began, batch := f.cfg.Now(), time.Now(), len(claims)
	claims, drops, err := f.markExecuting(ctx, tx, claims, now)
	if err != nil {
		return 0, time.Time{}, err
	}
	rows, err := f.load(ctx, tx, claims)
	if err != nil {
		return 0, time.Time{}, err
	}
	cals, err := store.LoadCalendars(ctx, tx, f.cfg.Namespace, calendarNames(rows))
	if err != nil {
		return 0, time.Time{}, err
	}
	fires, broken, dropped := plan(claims, rows, cals)
	drops = append(drops, dropped...)
	fires, lost, err := f.updateTriggers(ctx, tx, fires, now)
	if err != nil {
		return 0, time.Time{}, err
	}
	drops = append(drops, lost...)
	errEvs, err := f.setError(ctx, tx, broken, now)
	if err != nil {
		return 0, time.Time{}, err
	}
	for _, b := range broken {
		drops = append(drops, drop{claim: b.claim, reason: events.DropTriggerError, held: true})
	}
	if err := f.blockOthers(ctx, tx, fires); err != nil {
		return 0, time.Time{}, err
	}
	if err := f.recordFired(ctx, tx, drops); err != nil {
		return 0, time.Time{}, err
	}
	evs, spans, err := f.jobFired(ctx, fires, now, began, batch)
	if err != nil {
		return 0, time.Time{}, err
	}
	if len(spans) > 0 {
		// A fire span ends when its fire is committed; one whose transaction fails is never ended,
		// so never exported: that fire did not happen.
		tx.OnCommit(func() {
			for _, s := range spans {
				s.End()
			}
		})
	}
	dropEvs, err := f.dropped(drops, now)
	if err != nil {
		return 0, time.Time{}, err
	}
	tx.Append(evs...)
	tx.Append(errEvs...)
	tx.Append(dropEvs...)
	tx.OnCommit(func() { f.metrics.committed(ctx, fires, drops, now) })
	for _, fi := range fires {
		if t := fi.trig.NextFireTime; !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return len(fires), next, nil
}

// markExecuting moves the fired rows of claims made ahead from ACQUIRED to EXECUTING, keyed by
// fire id. A claim whose row is gone or no longer ACQUIRED was given back (recovery, a stop) and
// perhaps claimed again under another fire id: it is dropped.
func (f *Firer) markExecuting(ctx context.Context, tx pgx.Tx, claims []store.Claim, now time.Time) ([]store.Claim, []drop, error) {
	var ids []uuid.UUID
	for _, c := range claims {
		if c.Ahead {
			ids = append(ids, c.FireID)
		}
	}
	if len(ids) == 0 {
		return claims, nil, nil
	}
	rows, err := tx.Query(ctx, queries.Get("MarkExecuting"), ids, now)
	if err != nil {
		return nil, nil, fmt.Errorf("marking fired rows executing: %w", err)
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, nil, fmt.Errorf("marking fired rows executing: %w", err)
	}
	held := make(map[uuid.UUID]bool, len(marked))
	for _, id := range marked {
		held[id] = true
	}
	var lost []uuid.UUID
	for _, id := range ids {
		if !held[id] {
			lost = append(lost, id)
		}
	}
	fired, err := f.alreadyFired(ctx, tx, lost)
	if err != nil {
		return nil, nil, err
	}
	var kept []store.Claim
	var drops []drop
	for _, c := range claims {
		switch {
		case !c.Ahead || held[c.FireID]:
			kept = append(kept, c)
		case fired[c.FireID]:
			// An earlier attempt of this very claim committed, though its node did not hear so
			// (the database went away during the commit): the fire happened. Nothing to do.
		default:
			drops = append(drops, drop{claim: c, reason: events.DropClaimLost})
		}
	}
	return kept, drops, nil
}

// alreadyFired reports which of the fire ids already have an EXECUTING fired row.
func (f *Firer) alreadyFired(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) (map[uuid.UUID]bool, error) {
	out := map[uuid.UUID]bool{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, queries.Get("AlreadyFired"), ids)
	if err != nil {
		return nil, fmt.Errorf("reading fired rows: %w", err)
	}
	fired, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("reading fired rows: %w", err)
	}
	for _, id := range fired {
		out[id] = true
	}
	return out, nil
}

// row is what the fire transaction reads of a claimed trigger and its job.
// load returns the trigger and job of each claim, as they are now: read with the claim in this
// transaction (Claim.Read), or else here.
func (f *Firer) load(ctx context.Context, tx pgx.Tx, claims []store.Claim) (map[events.Key]*store.FireRow, error) {
	out := make(map[events.Key]*store.FireRow, len(claims))
	var g, n []string
	for _, c := range claims {
		if c.Read != nil && !c.Ahead {
			out[c.Trigger()] = c.Read
			continue
		}
		g, n = append(g, c.TriggerGroup), append(n, c.TriggerName)
	}
	if len(g) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, queries.Get("LoadForFire"), f.cfg.Namespace, g, n)
	if err != nil {
		return nil, fmt.Errorf("loading claimed triggers: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var key events.Key
		r := &store.FireRow{}
		if err := rows.Scan(append([]any{&key.Group, &key.Name}, r.Fields()...)...); err != nil {
			return nil, fmt.Errorf("loading claimed triggers: %w", err)
		}
		out[key] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading claimed triggers: %w", err)
	}
	return out, nil
}

func calendarNames(rows map[events.Key]*store.FireRow) []string {
	names := make([]string, 0, len(rows))
	for _, r := range rows {
		names = append(names, r.Calendar)
	}
	return names
}

// plan advances the trigger of each claim. A claim whose trigger is gone, or whose
// non-concurrent job already fires in this batch, is dropped; one whose trigger cannot be
// computed is returned as broken. Whether the trigger is still as claimed is left to the
// guarded update.
func plan(claims []store.Claim, rows map[events.Key]*store.FireRow, cals store.Calendars) (fires, broken []firing, drops []drop) {
	firedJob := map[events.Key]bool{} // non-concurrent jobs fired in this batch
	for _, c := range claims {
		r := rows[c.Trigger()]
		switch {
		case r == nil || r.Next == nil:
			drops = append(drops, drop{claim: c, reason: events.DropTriggerChanged, held: true})
			continue
		case c.Nonconcurrent && firedJob[c.Job()]:
			drops = append(drops, drop{claim: c, reason: events.DropJobBusy, held: true})
			continue
		}
		cal, err := cals.For(r.Calendar)
		var t *trigger.Trigger
		if err == nil {
			t, err = trigger.Restore(r.Schedule, r.Next, r.Prev, r.Times)
		}
		if err != nil {
			broken = append(broken, firing{claim: c, row: r, state: err.Error()})
			continue
		}
		t.Triggered(cal)
		state := store.StateWaiting
		if c.Nonconcurrent {
			state = store.StateBlocked
			firedJob[c.Job()] = true
		}
		if t.NextFireTime.IsZero() {
			state = store.StateComplete
		}
		fires = append(fires, firing{claim: c, row: r, trig: t, state: state})
	}
	return fires, broken, drops
}

// updateTriggers writes the advanced triggers, each guarded by the state and next fire time its
// claim was made on, and inserts the EXECUTING fired rows of the claims fired at once (those of
// claims made ahead were marked EXECUTING already) in the same round trip: a heavy flow's passes
// come one after the other, each a few round trips long. It returns the fires whose guard held,
// and the others as drops, whose fired rows recordFired deletes again (a claim read in this
// transaction, under its partition's lock, cannot fail its guard).
func (f *Firer) updateTriggers(ctx context.Context, tx pgx.Tx, fires []firing, now time.Time) ([]firing, []drop, error) {
	if len(fires) == 0 {
		return nil, nil, nil
	}
	k := len(fires)
	g, n, state, expect := make([]string, k), make([]string, k), make([]string, k), make([]string, k)
	next, prev, old := make([]*time.Time, k), make([]*time.Time, k), make([]time.Time, k)
	times, tids := make([]int32, k), make([]pgtype.TID, k)
	var atOnce []store.Claim
	for i, fi := range fires {
		g[i], n[i], state[i], expect[i] = fi.claim.TriggerGroup, fi.claim.TriggerName, fi.state, store.StateWaiting
		tids[i] = fi.row.TID
		if fi.claim.Ahead {
			expect[i] = store.StateAcquired
		} else {
			atOnce = append(atOnce, fi.claim)
		}
		next[i], prev[i] = store.NullTime(fi.trig.NextFireTime), store.NullTime(fi.trig.PreviousFireTime)
		times[i], old[i] = int32(fi.trig.TimesTriggered), fi.claim.SchedTime
	}
	b := &pgx.Batch{}
	b.Queue(queries.Get("UpdateTriggers"), tids, g, n, state, next, prev, times, old, expect)
	insert := store.QueueInsertFired(b, f.cfg.Namespace, f.cfg.InstanceID, store.FiredExecuting, now, atOnce)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, fmt.Errorf("updating fired triggers: %w", err)
	}
	keys, err := pgx.CollectRows(rows, store.ScanKey)
	if err != nil {
		return nil, nil, fmt.Errorf("updating fired triggers: %w", err)
	}
	if err := insert(br); err != nil {
		return nil, nil, err
	}
	if err := br.Close(); err != nil {
		return nil, nil, fmt.Errorf("updating fired triggers: %w", err)
	}
	updated := make(map[events.Key]bool, len(keys))
	for _, key := range keys {
		updated[key] = true
	}
	var kept []firing
	var lost []drop
	for _, fi := range fires {
		// A trigger's row is updated once, for one claim: another claim of it in this transaction
		// loses. Two can come together: a claim made ahead whose trigger was paused and resumed,
		// then claimed again, both due in one queue transaction; counted by key, both fired.
		if k := fi.claim.Trigger(); updated[k] {
			updated[k] = false
			kept = append(kept, fi)
		} else {
			lost = append(lost, drop{claim: fi.claim, reason: events.DropTriggerChanged, held: true})
		}
	}
	return kept, lost, nil
}

// blockOthers blocks the other triggers of the non-concurrent jobs that fired (Quartz: they wait
// until the execution completes). Only fires whose trigger update held count.
func (f *Firer) blockOthers(ctx context.Context, tx pgx.Tx, fires []firing) error {
	var g, n []string
	for _, fi := range fires {
		if fi.claim.Nonconcurrent {
			g, n = append(g, fi.claim.JobGroup), append(n, fi.claim.JobName)
		}
	}
	if len(g) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, queries.Get("BlockOthers"), f.cfg.Namespace, g, n); err != nil {
		return fmt.Errorf("blocking triggers of non-concurrent jobs: %w", err)
	}
	return nil
}

// recordFired deletes the fired rows of dropped claims that this transaction holds: those of
// claims made ahead, and those updateTriggers inserted for claims whose guard failed.
func (f *Firer) recordFired(ctx context.Context, tx pgx.Tx, drops []drop) error {
	var ids []uuid.UUID
	for _, d := range drops {
		if d.held {
			ids = append(ids, d.claim.FireID)
		}
	}
	return store.DeleteFired(ctx, tx, ids)
}

// setError puts the triggers of broken claims in ERROR and returns their TriggerError events.
func (f *Firer) setError(ctx context.Context, tx pgx.Tx, broken []firing, now time.Time) ([]events.Event, error) {
	reasons := map[events.Key]string{}
	for _, b := range broken {
		reasons[b.claim.Trigger()] = b.state
		f.cfg.Logger.ErrorContext(ctx, "trigger put in ERROR: its next fire time cannot be computed",
			slog.String("trigger", b.claim.Trigger().String()), slog.String("reason", b.state))
	}
	return store.SetTriggerError(ctx, tx, f.origin, reasons, now)
}

// dropped builds a ClaimDropped event per dropped claim.
func (f *Firer) dropped(drops []drop, now time.Time) ([]events.Event, error) {
	evs := make([]events.Event, 0, len(drops))
	for _, d := range drops {
		ev, err := f.origin.Trigger(events.TypeClaimDropped, d.claim.Trigger(), now, map[string]any{
			"fireId": d.claim.FireID, "trigger": d.claim.Trigger(), "scheduledTime": d.claim.SchedTime.UTC(), "reason": d.reason})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// jobFired builds the JobFired event of each fire. Each fire is a trace of its own: its
// "agate.fire" span is a root, linked to the span of the command that scheduled the trigger
// (the trigger row's traceparent), so that a repeating trigger makes one trace per fire rather
// than one endless trace. The span starts at began (the fire transaction's start) and is
// returned to be ended at commit; JobFired carries its traceparent. When no tracer provider is
// installed nothing is recorded (and no span is returned) and JobFired carries the scheduling
// command's trace context on, as every other step does.
func (f *Firer) jobFired(ctx context.Context, fires []firing, now, began time.Time, batch int) ([]events.Event, []trace.Span, error) {
	subjects := events.Subjects(f.cfg.Namespace)
	evs := make([]events.Event, 0, len(fires))
	var spans []trace.Span
	for _, fi := range fires {
		c, r := fi.claim, fi.row
		data, err := mergeData(r.JobData, r.TriggerData)
		if err != nil {
			return nil, nil, fmt.Errorf("trigger %s: %w", c.Trigger(), err)
		}
		jf := events.JobFired{
			FireID:           c.FireID,
			Job:              events.JobRef{Group: c.JobGroup, Name: c.JobName, Type: r.JobType},
			Trigger:          c.Trigger(),
			Data:             data,
			ScheduledTime:    c.SchedTime.UTC(),
			FiredTime:        now.UTC(),
			NextFireTime:     store.NullTime(fi.trig.NextFireTime),
			Nonconcurrent:    c.Nonconcurrent,
			RequestsRecovery: &c.RequestsRecovery,
			PersistData:      r.PersistData,
			TriggerState:     fi.state,
			TimesTriggered:   fi.trig.TimesTriggered,
		}
		if r.Prev != nil {
			jf.PreviousFireTime = store.NullTime(*r.Prev)
		}
		if r.TimeoutMilli != nil {
			jf.Timeout = (time.Duration(*r.TimeoutMilli) * time.Millisecond).String()
		}
		ev, err := events.New(events.TypeJobFired, f.origin.Source(), events.AggregateJob, c.Job().String(),
			subjects.Fired(r.JobType), now, jf)
		if err != nil {
			return nil, nil, err
		}
		// Without a tracer provider, Start returns the scheduling span's context as it is.
		scheduling := telemetry.WithTraceParent(ctx, r.TraceParent)
		spanCtx, span := f.tracer.Start(scheduling, "agate.fire", trace.WithNewRoot(),
			trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(began))
		if span.IsRecording() {
			if sc := trace.SpanContextFromContext(scheduling); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
			span.SetAttributes(telemetry.Messaging(telemetry.OpCreate, ev.Topic)...)
			span.SetAttributes(telemetry.DBPostgres,
				attribute.String("agate.namespace", f.cfg.Namespace),
				attribute.String("agate.fire_id", c.FireID.String()),
				attribute.String("agate.job", c.Job().String()),
				attribute.String("agate.job.type", r.JobType),
				attribute.String("agate.trigger", c.Trigger().String()),
				attribute.Int("agate.fire.batch_size", batch),
				attribute.Float64("agate.lock.wait_ms", float64(lockWait(ctx).Microseconds())/1000),
				attribute.Bool("agate.fire.ahead", c.Ahead))
			spans = append(spans, span)
		}
		ev.TraceParent = telemetry.TraceParent(spanCtx)
		evs = append(evs, ev)
	}
	return evs, spans, nil
}

type lockWaitKey struct{}

// withLockWait notes in ctx how long the fire transaction waited for its lock partition, for
// the fire spans' agate.lock.wait_ms.
func withLockWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, lockWaitKey{}, d)
}

// lockWait is what withLockWait noted; 0 for a transaction that took a free partition without
// waiting (the acquire pass's, with SKIP LOCKED).
func lockWait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(lockWaitKey{}).(time.Duration)
	return d
}

// mergeData merges job data with trigger data, trigger wins (the contract's JobFired.data).
func mergeData(jobData, triggerData []byte) (json.RawMessage, error) {
	if len(triggerData) == 0 || string(triggerData) == "{}" {
		return jobData, nil
	}
	if len(jobData) == 0 || string(jobData) == "{}" {
		return triggerData, nil
	}
	var m, t map[string]json.RawMessage
	if err := json.Unmarshal(jobData, &m); err != nil {
		return nil, fmt.Errorf("job data is not an object: %w", err)
	}
	if err := json.Unmarshal(triggerData, &t); err != nil {
		return nil, fmt.Errorf("trigger data is not an object: %w", err)
	}
	maps.Copy(m, t)
	return json.Marshal(m)
}
