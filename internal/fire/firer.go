package fire

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/trigger"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// MaxBatchDefault is the default of Config.MaxBatch.
const MaxBatchDefault = 500

// Config configures a Firer.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned).
	Locks store.Locks
	// MaxBatch is the most claims fired in one transaction. Default 500.
	MaxBatch int
	Logger   *slog.Logger
	// Now is the node clock; tests inject one.
	Now func() time.Time
	// OnFired is called after a fire transaction commits (wired to the acquirer's Wake: a fired
	// trigger's next fire may already be due).
	OnFired func()
}

// Publisher publishes committed events (events.Relay).
type Publisher interface {
	Publish(ctx context.Context, evs []events.Event) error
}

// Firer fires claims: in the caller's transaction (FireInTx) or, for claims acquired ahead of
// time, from its own queue when they are due (Run).
type Firer struct {
	cfg    Config
	pool   *pgxpool.Pool
	pub    Publisher
	tracer trace.Tracer

	mu      sync.Mutex
	pending []store.Claim // sorted by SchedTime
	kick    chan struct{}
}

// New builds a Firer.
func New(cfg Config, pool *pgxpool.Pool, pub Publisher) *Firer {
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, MaxBatchDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnFired == nil {
		cfg.OnFired = func() {}
	}
	return &Firer{cfg: cfg, pool: pool, pub: pub, tracer: telemetry.Tracer("fire"), kick: make(chan struct{}, 1)}
}

// Schedule queues claims acquired ahead of their fire time.
func (f *Firer) Schedule(claims []store.Claim) {
	if len(claims) == 0 {
		return
	}
	f.mu.Lock()
	f.pending = append(f.pending, claims...)
	sort.SliceStable(f.pending, func(i, j int) bool { return f.pending[i].SchedTime.Before(f.pending[j].SchedTime) })
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Committed hands the JobFired events of a committed transaction to the publisher. A failure is
// logged, not returned: the events are in the log and the relay's sweep publishes them.
func (f *Firer) Committed(ctx context.Context, evs []events.Event) {
	if len(evs) == 0 {
		return
	}
	if err := f.pub.Publish(ctx, evs); err != nil {
		f.cfg.Logger.WarnContext(ctx, "publishing fired jobs failed; the outbox sweep will publish them",
			slog.Int("events", len(evs)), slog.Any("error", err))
	}
}

// Run fires queued claims at their time until ctx is cancelled, then releases what is left.
func (f *Firer) Run(ctx context.Context) error {
	for {
		due, next := f.takeDue()
		if len(due) > 0 {
			if err := f.fireDeferred(ctx, due); err != nil && ctx.Err() == nil {
				f.cfg.Logger.WarnContext(ctx, "fire transaction failed; releasing its claims",
					slog.Int("claims", len(due)), slog.Any("error", err))
				f.release(ctx, due)
			}
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = next.Sub(f.cfg.Now())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.mu.Lock()
			left := f.pending
			f.pending = nil
			f.mu.Unlock()
			f.release(ctx, left)
			return nil
		case <-f.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// takeDue pops the claims due now (at most MaxBatch) and returns the next pending time.
func (f *Firer) takeDue() ([]store.Claim, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.cfg.Now()
	n := 0
	for n < len(f.pending) && n < f.cfg.MaxBatch && !f.pending[n].SchedTime.After(now) {
		n++
	}
	due := slices.Clone(f.pending[:n])
	f.pending = f.pending[n:]
	var next time.Time
	if len(f.pending) > 0 {
		next = f.pending[0].SchedTime
	}
	return due, next
}

// fireDeferred fires claims in a transaction per lock partition they were made under.
func (f *Firer) fireDeferred(ctx context.Context, claims []store.Claim) error {
	byPartition := map[int][]store.Claim{}
	for _, c := range claims {
		byPartition[c.Partition] = append(byPartition[c.Partition], c)
	}
	for p, group := range byPartition {
		var evs []events.Event
		err := store.InTx(ctx, f.pool, func(tx pgx.Tx) error {
			if err := f.cfg.Locks.Partition(ctx, tx, p); err != nil {
				return err
			}
			var err error
			evs, err = f.FireInTx(ctx, tx, group, true)
			return err
		})
		if err != nil {
			return fmt.Errorf("firing %d triggers: %w", len(group), err)
		}
		f.Committed(ctx, evs)
	}
	f.cfg.OnFired()
	return nil
}

// release gives claims back: their triggers return to WAITING and their fired rows go.
func (f *Firer) release(ctx context.Context, claims []store.Claim) {
	if len(claims) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	g, n, nft, ids := keysOf(claims)
	err := store.InTx(ctx, f.pool, func(tx pgx.Tx) error {
		if err := f.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queries.Get("Release"), f.cfg.Namespace, g, n, nft); err != nil {
			return fmt.Errorf("releasing triggers: %w", err)
		}
		return store.DeleteFired(ctx, tx, ids)
	})
	if err != nil {
		// Recovery releases the claims of a node that is gone; nothing is lost.
		f.cfg.Logger.WarnContext(ctx, "releasing claims failed; cluster recovery will release them",
			slog.Int("claims", len(claims)), slog.Any("error", err))
		return
	}
	f.cfg.Logger.InfoContext(ctx, "released claims", slog.Int("claims", len(claims)))
}

func keysOf(claims []store.Claim) (g, n []string, nft []time.Time, ids []uuid.UUID) {
	for _, c := range claims {
		g, n = append(g, c.TriggerGroup), append(n, c.TriggerName)
		nft, ids = append(nft, c.SchedTime), append(ids, c.FireID)
	}
	return g, n, nft, ids
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

// FireInTx fires claims inside tx, which holds TRIGGER_ACCESS. acquired says whether the claims'
// triggers are ACQUIRED with fired rows (deferred fire) or still WAITING (fired while acquiring).
// Claims whose trigger changed since they were made are dropped (their fired row deleted).
func (f *Firer) FireInTx(ctx context.Context, tx pgx.Tx, claims []store.Claim, acquired bool) ([]events.Event, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	ns := f.cfg.Namespace
	now := f.cfg.Now()
	expect := store.StateWaiting
	if acquired {
		expect = store.StateAcquired
	}
	g, n, _, _ := keysOf(claims)
	rowsByKey, err := f.load(ctx, tx, g, n)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, r := range rowsByKey {
		if r.calendar != "" {
			names[r.calendar] = true
		}
	}
	cals, err := store.LoadCalendars(ctx, tx, ns, slices.Collect(maps.Keys(names)))
	if err != nil {
		return nil, err
	}

	type firing struct {
		claim store.Claim
		row   *row
		trig  *trigger.Trigger
		state string
	}
	var fires []firing
	var stale []uuid.UUID
	var blockJobsG, blockJobsN []string
	blocked := map[[2]string]bool{}
	for _, c := range claims {
		r := rowsByKey[[2]string{c.TriggerGroup, c.TriggerName}]
		job := [2]string{c.JobGroup, c.JobName}
		if r == nil || r.state != expect || r.next == nil || !r.next.Equal(c.SchedTime) || (c.Nonconcurrent && blocked[job]) {
			stale = append(stale, c.FireID)
			continue
		}
		var def trigger.Definition
		if err := json.Unmarshal(r.schedule, &def); err != nil {
			return nil, fmt.Errorf("trigger %s.%s has an unreadable schedule: %w", c.TriggerGroup, c.TriggerName, err)
		}
		t := &trigger.Trigger{Definition: def, NextFireTime: *r.next, TimesTriggered: r.times}
		if r.prev != nil {
			t.PreviousFireTime = *r.prev
		}
		t.Triggered(cals[r.calendar])
		state := store.StateWaiting
		if c.Nonconcurrent {
			state = store.StateBlocked
			blocked[job] = true
			blockJobsG, blockJobsN = append(blockJobsG, c.JobGroup), append(blockJobsN, c.JobName)
		}
		if t.NextFireTime.IsZero() {
			state = store.StateComplete
		}
		fires = append(fires, firing{claim: c, row: r, trig: t, state: state})
	}

	if len(fires) > 0 {
		k := len(fires)
		ug, un, us := make([]string, k), make([]string, k), make([]string, k)
		unext, uprev, uold := make([]*time.Time, k), make([]*time.Time, k), make([]time.Time, k)
		utimes := make([]int32, k)
		uexpect := make([]string, k)
		for i, fi := range fires {
			ug[i], un[i], us[i] = fi.claim.TriggerGroup, fi.claim.TriggerName, fi.state
			unext[i], uprev[i] = store.NullTime(fi.trig.NextFireTime), store.NullTime(fi.trig.PreviousFireTime)
			utimes[i], uold[i], uexpect[i] = int32(fi.trig.TimesTriggered), fi.claim.SchedTime, expect
		}
		rows, err := tx.Query(ctx, queries.Get("UpdateTriggers"), ns, ug, un, us, unext, uprev, utimes, uold, uexpect)
		if err != nil {
			return nil, fmt.Errorf("updating fired triggers: %w", err)
		}
		updated := map[[2]string]bool{}
		for rows.Next() {
			var key [2]string
			if err := rows.Scan(&key[0], &key[1]); err != nil {
				rows.Close()
				return nil, fmt.Errorf("updating fired triggers: %w", err)
			}
			updated[key] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("updating fired triggers: %w", err)
		}
		kept := fires[:0]
		for _, fi := range fires {
			if updated[[2]string{fi.claim.TriggerGroup, fi.claim.TriggerName}] {
				kept = append(kept, fi)
			} else {
				stale = append(stale, fi.claim.FireID)
			}
		}
		fires = kept
	}
	if len(blockJobsG) > 0 {
		if _, err := tx.Exec(ctx, queries.Get("BlockOthers"), ns, blockJobsG, blockJobsN); err != nil {
			return nil, fmt.Errorf("blocking triggers of non-concurrent jobs: %w", err)
		}
	}
	if acquired {
		if err := store.DeleteFired(ctx, tx, stale); err != nil {
			return nil, err
		}
		ids := make([]uuid.UUID, len(fires))
		for i, fi := range fires {
			ids[i] = fi.claim.FireID
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, queries.Get("MarkExecuting"), ids, now); err != nil {
				return nil, fmt.Errorf("marking fired rows executing: %w", err)
			}
		}
	} else {
		cl := make([]store.Claim, len(fires))
		for i, fi := range fires {
			cl[i] = fi.claim
		}
		if err := store.InsertFired(ctx, tx, ns, f.cfg.InstanceID, store.FiredExecuting, now, cl); err != nil {
			return nil, err
		}
	}

	source := events.Source(ns, f.cfg.InstanceID)
	subjects := events.Subjects(ns)
	evs := make([]events.Event, 0, len(fires))
	for _, fi := range fires {
		data, err := mergeData(fi.row.jobData, fi.row.triggerData)
		if err != nil {
			return nil, fmt.Errorf("trigger %s.%s: %w", fi.claim.TriggerGroup, fi.claim.TriggerName, err)
		}
		jf := events.JobFired{
			FireID:        fi.claim.FireID,
			Job:           events.JobRef{Group: fi.claim.JobGroup, Name: fi.claim.JobName, Type: fi.row.jobType},
			Trigger:       events.Key{Group: fi.claim.TriggerGroup, Name: fi.claim.TriggerName},
			Data:          data,
			ScheduledTime: fi.claim.SchedTime.UTC(),
			FiredTime:     now.UTC(),
			NextFireTime:  store.NullTime(fi.trig.NextFireTime),
			Nonconcurrent: fi.claim.Nonconcurrent,
		}
		if fi.row.prev != nil {
			p := fi.row.prev.UTC()
			jf.PreviousFireTime = &p
		}
		if fi.row.timeoutMilli != nil {
			jf.Timeout = (time.Duration(*fi.row.timeoutMilli) * time.Millisecond).String()
		}
		jobKey := events.Key{Group: fi.claim.JobGroup, Name: fi.claim.JobName}
		ev, err := events.New(events.TypeJobFired, source, events.AggregateJob, jobKey.String(),
			subjects.Fired(fi.row.jobType), now, jf)
		if err != nil {
			return nil, err
		}
		spanCtx, span := f.tracer.Start(telemetry.WithTraceParent(ctx, fi.row.traceParent), "agate.fire",
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(attribute.String("agate.fire_id", fi.claim.FireID.String()),
				attribute.String("agate.job", jobKey.String())))
		ev.TraceParent = telemetry.TraceParent(spanCtx)
		span.End()
		evs = append(evs, ev)
	}
	if err := events.Append(ctx, tx, ns, evs); err != nil {
		return nil, err
	}
	return evs, nil
}

func (f *Firer) load(ctx context.Context, tx pgx.Tx, g, n []string) (map[[2]string]*row, error) {
	rows, err := tx.Query(ctx, queries.Get("LoadForFire"), f.cfg.Namespace, g, n)
	if err != nil {
		return nil, fmt.Errorf("loading claimed triggers: %w", err)
	}
	defer rows.Close()
	out := make(map[[2]string]*row, len(g))
	for rows.Next() {
		var key [2]string
		r := &row{}
		if err := rows.Scan(&key[0], &key[1], &r.state, &r.next, &r.prev, &r.times, &r.schedule, &r.calendar,
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

// mergeData merges job data with trigger data, trigger wins (CONTRACT.md JobFired.data).
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
