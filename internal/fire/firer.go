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
}

// Firer is the fire transaction: it fires claims inside a transaction that holds their lock
// partition.
type Firer struct {
	cfg    Config
	origin events.Origin
	tracer trace.Tracer
}

// New builds a Firer.
func New(cfg Config) *Firer {
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Firer{cfg: cfg, origin: events.Origin{Namespace: cfg.Namespace, InstanceID: cfg.InstanceID},
		tracer: telemetry.Tracer("fire")}
}

// firing is one claim that passed its checks, with its trigger advanced.
type firing struct {
	claim store.Claim
	row   *row
	trig  *trigger.Trigger
	state string // the trigger's state after the fire
}

// Fire fires claims inside tx, which holds the claims' lock partition: each claim's trigger
// advances (Quartz's triggered()), its fired row becomes EXECUTING, and a JobFired event goes
// into the log. A claim whose trigger changed since it was made (another state, another next
// fire time, a non-concurrent job already fired in this batch) is dropped, and its fired row
// deleted. It returns how many claims fired.
func (f *Firer) Fire(ctx context.Context, tx *outbox.Tx, claims []store.Claim) (int, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	now := f.cfg.Now()
	rows, err := f.load(ctx, tx, claims)
	if err != nil {
		return 0, err
	}
	cals, err := store.LoadCalendars(ctx, tx, f.cfg.Namespace, calendarNames(rows))
	if err != nil {
		return 0, err
	}
	fires, stale, err := plan(claims, rows, cals)
	if err != nil {
		return 0, err
	}
	fires, lost, err := f.updateTriggers(ctx, tx, fires)
	if err != nil {
		return 0, err
	}
	stale = append(stale, lost...)
	if err := f.blockOthers(ctx, tx, fires); err != nil {
		return 0, err
	}
	if err := f.recordFired(ctx, tx, fires, stale, now); err != nil {
		return 0, err
	}
	evs, err := f.jobFired(ctx, fires, now)
	if err != nil {
		return 0, err
	}
	tx.Append(evs...)
	return len(fires), nil
}

// row is what the fire transaction reads of a claimed trigger and its job.
type row struct {
	state        string
	next, prev   *time.Time
	times        int
	schedule     []byte
	calendar     string
	triggerData  []byte
	traceParent  string
	jobType      string
	jobData      []byte
	timeoutMilli *int64
}

func (f *Firer) load(ctx context.Context, tx pgx.Tx, claims []store.Claim) (map[events.Key]*row, error) {
	g, n := make([]string, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		g[i], n[i] = c.TriggerGroup, c.TriggerName
	}
	rows, err := tx.Query(ctx, queries.Get("LoadForFire"), f.cfg.Namespace, g, n)
	if err != nil {
		return nil, fmt.Errorf("loading claimed triggers: %w", err)
	}
	defer rows.Close()
	out := make(map[events.Key]*row, len(claims))
	for rows.Next() {
		var key events.Key
		r := &row{}
		if err := rows.Scan(&key.Group, &key.Name, &r.state, &r.next, &r.prev, &r.times, &r.schedule, &r.calendar,
			&r.triggerData, &r.traceParent, &r.jobType, &r.jobData, &r.timeoutMilli); err != nil {
			return nil, fmt.Errorf("loading claimed triggers: %w", err)
		}
		out[key] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("loading claimed triggers: %w", err)
	}
	return out, nil
}

func calendarNames(rows map[events.Key]*row) []string {
	names := make([]string, 0, len(rows))
	for _, r := range rows {
		names = append(names, r.calendar)
	}
	return names
}

// plan checks each claim against its trigger's row and advances the trigger of those that still
// hold; the others are stale.
func plan(claims []store.Claim, rows map[events.Key]*row, cals map[string]trigger.Calendar) ([]firing, []uuid.UUID, error) {
	var fires []firing
	var stale []uuid.UUID
	firedJob := map[events.Key]bool{} // non-concurrent jobs fired in this batch
	for _, c := range claims {
		r := rows[c.Trigger()]
		expect := store.StateWaiting
		if c.Ahead {
			expect = store.StateAcquired
		}
		if r == nil || r.state != expect || r.next == nil || !r.next.Equal(c.SchedTime) || (c.Nonconcurrent && firedJob[c.Job()]) {
			stale = append(stale, c.FireID)
			continue
		}
		t, err := trigger.Restore(r.schedule, r.next, r.prev, r.times)
		if err != nil {
			return nil, nil, fmt.Errorf("trigger %s: %w", c.Trigger(), err)
		}
		t.Triggered(cals[r.calendar])
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
	return fires, stale, nil
}

// updateTriggers writes the advanced triggers, each guarded by the state and next fire time its
// claim was made on. It returns the fires whose guard held and the fire ids of those whose did
// not.
func (f *Firer) updateTriggers(ctx context.Context, tx pgx.Tx, fires []firing) ([]firing, []uuid.UUID, error) {
	if len(fires) == 0 {
		return nil, nil, nil
	}
	k := len(fires)
	g, n, state, expect := make([]string, k), make([]string, k), make([]string, k), make([]string, k)
	next, prev, old := make([]*time.Time, k), make([]*time.Time, k), make([]time.Time, k)
	times := make([]int32, k)
	for i, fi := range fires {
		g[i], n[i], state[i], expect[i] = fi.claim.TriggerGroup, fi.claim.TriggerName, fi.state, fi.row.state
		next[i], prev[i] = store.NullTime(fi.trig.NextFireTime), store.NullTime(fi.trig.PreviousFireTime)
		times[i], old[i] = int32(fi.trig.TimesTriggered), fi.claim.SchedTime
	}
	rows, err := tx.Query(ctx, queries.Get("UpdateTriggers"), f.cfg.Namespace, g, n, state, next, prev, times, old, expect)
	if err != nil {
		return nil, nil, fmt.Errorf("updating fired triggers: %w", err)
	}
	keys, err := pgx.CollectRows(rows, store.ScanKey)
	if err != nil {
		return nil, nil, fmt.Errorf("updating fired triggers: %w", err)
	}
	updated := make(map[events.Key]bool, len(keys))
	for _, key := range keys {
		updated[key] = true
	}
	var kept []firing
	var lost []uuid.UUID
	for _, fi := range fires {
		if updated[fi.claim.Trigger()] {
			kept = append(kept, fi)
		} else {
			lost = append(lost, fi.claim.FireID)
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

// recordFired makes the fired rows of the fires EXECUTING (inserting those of claims fired at
// once) and deletes the fired rows of stale claims made ahead.
func (f *Firer) recordFired(ctx context.Context, tx pgx.Tx, fires []firing, stale []uuid.UUID, now time.Time) error {
	if err := store.DeleteFired(ctx, tx, stale); err != nil {
		return err
	}
	var ahead []uuid.UUID
	var atOnce []store.Claim
	for _, fi := range fires {
		if fi.claim.Ahead {
			ahead = append(ahead, fi.claim.FireID)
		} else {
			atOnce = append(atOnce, fi.claim)
		}
	}
	if len(ahead) > 0 {
		if _, err := tx.Exec(ctx, queries.Get("MarkExecuting"), ahead, now); err != nil {
			return fmt.Errorf("marking fired rows executing: %w", err)
		}
	}
	return store.InsertFired(ctx, tx, f.cfg.Namespace, f.cfg.InstanceID, store.FiredExecuting, now, atOnce)
}

// jobFired builds the JobFired event of each fire, each with a span in the trace of the command
// that scheduled its trigger.
func (f *Firer) jobFired(ctx context.Context, fires []firing, now time.Time) ([]events.Event, error) {
	subjects := events.Subjects(f.cfg.Namespace)
	evs := make([]events.Event, 0, len(fires))
	for _, fi := range fires {
		c, r := fi.claim, fi.row
		data, err := mergeData(r.jobData, r.triggerData)
		if err != nil {
			return nil, fmt.Errorf("trigger %s: %w", c.Trigger(), err)
		}
		jf := events.JobFired{
			FireID:        c.FireID,
			Job:           events.JobRef{Group: c.JobGroup, Name: c.JobName, Type: r.jobType},
			Trigger:       c.Trigger(),
			Data:          data,
			ScheduledTime: c.SchedTime.UTC(),
			FiredTime:     now.UTC(),
			NextFireTime:  store.NullTime(fi.trig.NextFireTime),
			Nonconcurrent: c.Nonconcurrent,
		}
		if r.prev != nil {
			jf.PreviousFireTime = store.NullTime(*r.prev)
		}
		if r.timeoutMilli != nil {
			jf.Timeout = (time.Duration(*r.timeoutMilli) * time.Millisecond).String()
		}
		ev, err := events.New(events.TypeJobFired, f.origin.Source(), events.AggregateJob, c.Job().String(),
			subjects.Fired(r.jobType), now, jf)
		if err != nil {
			return nil, err
		}
		spanCtx, span := f.tracer.Start(telemetry.WithTraceParent(ctx, r.traceParent), "agate.fire",
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("agate.fire_id", c.FireID.String()),
				attribute.String("agate.job", c.Job().String())))
		ev.TraceParent = telemetry.TraceParent(spanCtx)
		span.End()
		evs = append(evs, ev)
	}
	return evs, nil
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
