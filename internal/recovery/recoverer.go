package recovery

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	CheckinIntervalDefault  = 5 * time.Second
	MisfireThresholdDefault = time.Minute
	misfireBatch            = 500
)

// Config configures a Recoverer.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned); recovery takes every partition.
	Locks store.Locks
	// CheckinInterval is how often this node checks in and scans. Default 5s.
	CheckinInterval time.Duration
	// MisfireThreshold is how late a trigger may be before its misfire instruction applies
	// (Quartz's misfireThreshold). Default 1m.
	MisfireThreshold time.Duration
	Logger           *slog.Logger
	// Now is the node clock used for misfire decisions; tests inject one.
	Now func() time.Time
	// OnChanged is called after triggers were released or rescheduled (wired to acquire's Wake).
	OnChanged func()
}

// Publisher publishes committed events (events.Relay).
type Publisher interface {
	Publish(ctx context.Context, evs []events.Event) error
}

// Recoverer runs check-in, failed-node recovery and the misfire scan.
type Recoverer struct {
	cfg       Config
	pool      *pgxpool.Pool
	pub       Publisher
	firstDone bool
}

// New builds a Recoverer.
func New(cfg Config, pool *pgxpool.Pool, pub Publisher) *Recoverer {
	cfg.CheckinInterval = cmp.Or(cfg.CheckinInterval, CheckinIntervalDefault)
	cfg.MisfireThreshold = cmp.Or(cfg.MisfireThreshold, MisfireThresholdDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.OnChanged == nil {
		cfg.OnChanged = func() {}
	}
	return &Recoverer{cfg: cfg, pool: pool, pub: pub}
}

// Run checks in and scans every CheckinInterval until ctx is cancelled.
func (r *Recoverer) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.CheckinInterval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.WarnContext(ctx, "recovery pass failed; retrying", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Result says what one pass did.
type Result struct {
	FailedNodes []string
	Released    int
	Misfired    int
}

// RunOnce checks in, recovers failed nodes and handles misfires.
func (r *Recoverer) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	ns := r.cfg.Namespace
	if _, err := r.pool.Exec(ctx, queries.Get("CheckIn"), ns, r.cfg.InstanceID, r.cfg.CheckinInterval.Milliseconds()); err != nil {
		return res, fmt.Errorf("checking in: %w", err)
	}
	var evs []events.Event
	err := store.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		evs, res = nil, Result{}
		if err := store.WithLock(ctx, tx, ns, store.LockStateAccess); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queries.Get("FailedNodes"), ns, r.cfg.InstanceID, !r.firstDone)
		if err != nil {
			return fmt.Errorf("finding failed nodes: %w", err)
		}
		failed, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("finding failed nodes: %w", err)
		}
		if len(failed) == 0 {
			return nil
		}
		if err := r.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		released, err := tx.Query(ctx, queries.Get("ReleaseAcquired"), ns, failed)
		if err != nil {
			return fmt.Errorf("releasing triggers of failed nodes: %w", err)
		}
		keys, err := pgx.CollectRows(released, func(row pgx.CollectableRow) (events.Key, error) {
			var k events.Key
			err := row.Scan(&k.Group, &k.Name)
			return k, err
		})
		if err != nil {
			return fmt.Errorf("releasing triggers of failed nodes: %w", err)
		}
		now := r.cfg.Now()
		for _, k := range keys {
			ev, err := events.New(events.TypeTriggerReleased, events.Source(ns, r.cfg.InstanceID), events.AggregateTrigger,
				k.String(), events.Subjects(ns).Evt("trigger"), now, map[string]any{"trigger": k, "reason": "node failed", "nodes": failed})
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		if _, err := tx.Exec(ctx, queries.Get("ForgetNodes"), ns, failed, r.cfg.InstanceID); err != nil {
			return fmt.Errorf("removing failed nodes: %w", err)
		}
		res.FailedNodes, res.Released = failed, len(keys)
		return events.Append(ctx, tx, ns, evs)
	})
	if err != nil {
		return res, fmt.Errorf("recovering failed nodes: %w", err)
	}
	r.firstDone = true
	if len(res.FailedNodes) > 0 {
		r.cfg.Logger.InfoContext(ctx, "recovered failed scheduler nodes", slog.Any("nodes", res.FailedNodes),
			slog.Int("released_triggers", res.Released))
	}
	r.publish(ctx, evs)
	misfired, err := r.handleMisfires(ctx)
	res.Misfired = misfired
	if res.Released > 0 || misfired > 0 {
		r.cfg.OnChanged()
	}
	return res, err
}

func (r *Recoverer) handleMisfires(ctx context.Context) (int, error) {
	ns := r.cfg.Namespace
	var evs []events.Event
	err := store.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		evs = nil
		if err := r.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		now := r.cfg.Now()
		rows, err := tx.Query(ctx, queries.Get("SelectMisfired"), ns, now.Add(-r.cfg.MisfireThreshold), misfireBatch)
		if err != nil {
			return fmt.Errorf("selecting misfired triggers: %w", err)
		}
		type misfired struct {
			key      events.Key
			schedule []byte
			next     time.Time
			prev     *time.Time
			times    int
			calendar string
		}
		ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (misfired, error) {
			var m misfired
			err := row.Scan(&m.key.Group, &m.key.Name, &m.schedule, &m.next, &m.prev, &m.times, &m.calendar)
			return m, err
		})
		if err != nil {
			return fmt.Errorf("selecting misfired triggers: %w", err)
		}
		if len(ms) == 0 {
			return nil
		}
		var names []string
		for _, m := range ms {
			if m.calendar != "" {
				names = append(names, m.calendar)
			}
		}
		cals, err := store.LoadCalendars(ctx, tx, ns, names)
		if err != nil {
			return err
		}
		for _, m := range ms {
			var def trigger.Definition
			if err := json.Unmarshal(m.schedule, &def); err != nil {
				return fmt.Errorf("trigger %s has an unreadable schedule: %w", m.key, err)
			}
			t := &trigger.Trigger{Definition: def, NextFireTime: m.next, TimesTriggered: m.times}
			if m.prev != nil {
				t.PreviousFireTime = *m.prev
			}
			t.UpdateAfterMisfire(cals[m.calendar], now)
			schedule, err := json.Marshal(t.Definition)
			if err != nil {
				return fmt.Errorf("encoding trigger schedule: %w", err)
			}
			if _, err := tx.Exec(ctx, queries.Get("UpdateMisfired"), ns, m.key.Group, m.key.Name,
				store.NullTime(t.NextFireTime), store.NullTime(t.PreviousFireTime), t.TimesTriggered, schedule, m.next); err != nil {
				return fmt.Errorf("rescheduling misfired trigger %s: %w", m.key, err)
			}
			ev, err := events.New(events.TypeTriggerMisfired, events.Source(ns, r.cfg.InstanceID), events.AggregateTrigger,
				m.key.String(), events.Subjects(ns).Evt("trigger"), now, map[string]any{
					"trigger": m.key, "missedFireTime": m.next.UTC(), "nextFireTime": store.NullTime(t.NextFireTime),
					"instruction": cmp.Or(def.Misfire, "smart_policy")})
			if err != nil {
				return err
			}
			evs = append(evs, ev)
		}
		return events.Append(ctx, tx, ns, evs)
	})
	if err != nil {
		return 0, fmt.Errorf("handling misfires: %w", err)
	}
	if len(evs) > 0 {
		r.cfg.Logger.InfoContext(ctx, "handled misfired triggers", slog.Int("triggers", len(evs)))
	}
	r.publish(ctx, evs)
	return len(evs), nil
}

func (r *Recoverer) publish(ctx context.Context, evs []events.Event) {
	if len(evs) == 0 {
		return
	}
	if err := r.pub.Publish(ctx, evs); err != nil {
		r.cfg.Logger.WarnContext(ctx, "publishing recovery events failed; the outbox sweep will publish them",
			slog.Any("error", err))
	}
}

// Leave is a graceful exit from the cluster: this node's claims not yet fired go back to WAITING
// at once (instead of after failure detection) and its membership row is removed. Call it after
// the node's loops have stopped.
func (r *Recoverer) Leave(ctx context.Context) error {
	ns := r.cfg.Namespace
	released := 0
	err := store.InTx(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, queries.Get("ReleaseAcquired"), ns, []string{r.cfg.InstanceID})
		if err != nil {
			return fmt.Errorf("releasing this node's claims: %w", err)
		}
		released = int(tag.RowsAffected())
		if _, err := tx.Exec(ctx, queries.Get("Leave"), ns, r.cfg.InstanceID); err != nil {
			return fmt.Errorf("leaving the cluster: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.cfg.Logger.InfoContext(ctx, "left the cluster", slog.Int("released_claims", released))
	return nil
}
