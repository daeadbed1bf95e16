package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/store"
)

// Defaults of the event log's upkeep.
const (
	// EventRetentionDefault keeps a week of the log, as long as the JetStream streams keep their
	// messages: enough to answer "what happened to this job" for any recent run.
	EventRetentionDefault = 7 * 24 * time.Hour
	// SnapshotIntervalDefault bounds the events replay applies after the latest snapshot.
	SnapshotIntervalDefault = time.Hour
	// partitionsAhead is how many days of partitions exist beyond today, so that an insert
	// always finds its partition even when no node ran for a few days.
	partitionsAhead = 3
	// firedMargin keeps the partitions that may hold the JobFired of an execution in flight
	// (recovery reads it to fire the execution again), allowing for clock skew between nodes.
	firedMargin = time.Hour
)

// EventsConfig configures the upkeep of the event log.
type EventsConfig struct {
	Namespace string
	// Retention is how long the log keeps events, by day partitions; 0 keeps them forever.
	Retention time.Duration
	// SnapshotInterval is how often a snapshot of the namespace's projection is taken; 0 never
	// (then no partition can be dropped).
	SnapshotInterval time.Duration
	Logger           *slog.Logger
	// Now is the clock retention counts from (tests move it).
	Now func() time.Time
}

// EnsurePartitions creates the log's day partitions from today (the database's clock) to
// partitionsAhead days ahead. Any node may call it at any time.
func EnsurePartitions(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `do $$
declare
    d date;
    p text;
begin
    for i in 0..`+fmt.Sprint(partitionsAhead)+` loop
        d := (now() at time zone 'UTC')::date + i;
        p := 'events_p' || to_char(d, 'YYYYMMDD');
        if to_regclass(p) is null then
            execute format('create table %I partition of events for values from (%L) to (%L)',
                           p, d::timestamp at time zone 'UTC', (d + 1)::timestamp at time zone 'UTC');
        end if;
    end loop;
end $$`)
	if err != nil {
		return fmt.Errorf("creating the event log's partitions: %w", err)
	}
	return nil
}

// Events keeps the log in shape: partitions ahead, a snapshot every SnapshotInterval, and the
// partitions older than Retention dropped once a snapshot covers them.
type Events struct {
	cfg  EventsConfig
	pool *pgxpool.Pool
}

// NewEvents returns the upkeep of the log of cfg.Namespace.
func NewEvents(cfg EventsConfig, pool *pgxpool.Pool) *Events {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Events{cfg: cfg, pool: pool}
}

// eventsPassEvery is how often Run makes a pass.
const eventsPassEvery = 5 * time.Minute

// Run makes a pass at once and then every few minutes until ctx ends; a failed pass is logged
// and tried again at the next.
func (e *Events) Run(ctx context.Context) error {
	for {
		if _, err := e.Pass(ctx); err != nil && ctx.Err() == nil {
			e.cfg.Logger.WarnContext(ctx, "event log upkeep failed; trying again later", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(eventsPassEvery):
		}
	}
}

// Pass runs one round of upkeep: partitions ahead, a snapshot when the latest is older than the
// interval, and the drop of expired partitions. It returns the partitions dropped. Nodes take
// turns: a pass while another node's runs does nothing.
func (e *Events) Pass(ctx context.Context) ([]string, error) {
	if err := EnsurePartitions(ctx, e.pool); err != nil {
		return nil, err
	}
	conn, err := e.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("event log upkeep: %w", err)
	}
	defer conn.Release()
	release, mine, err := store.TryTurn(ctx, conn, "agate:event-log-upkeep")
	if err != nil {
		return nil, fmt.Errorf("event log upkeep: %w", err)
	}
	if !mine {
		return nil, nil
	}
	defer release()
	if e.cfg.SnapshotInterval > 0 {
		var age *time.Duration
		err := e.pool.QueryRow(ctx, `select now() - max(taken_at) from event_snapshots where sched_name = $1`,
			e.cfg.Namespace).Scan(&age)
		if err != nil {
			return nil, fmt.Errorf("reading the age of the latest snapshot: %w", err)
		}
		if age == nil || *age >= e.cfg.SnapshotInterval {
			snap, err := replay.TakeSnapshot(ctx, e.pool, e.cfg.Namespace)
			if err != nil {
				return nil, err
			}
			e.cfg.Logger.InfoContext(ctx, "took a snapshot of the event log's projection",
				slog.Int("events_applied", snap.Events), slog.Int64("below_seq", snap.Below))
		}
	}
	if e.cfg.Retention <= 0 {
		return nil, nil
	}
	dropped, err := e.dropExpired(ctx)
	if err != nil {
		return dropped, err
	}
	// Once more: a clock far ahead of the database's (a test's) may have dropped today's.
	return dropped, EnsurePartitions(ctx, e.pool)
}

var partitionUpper = regexp.MustCompile(`TO \('([^']+)'\)`)

type partition struct {
	name  string
	upper time.Time
}

// partitions lists the log's partitions with their upper bounds.
func (e *Events) partitions(ctx context.Context) ([]partition, error) {
	// Bounds are printed in the session's time zone: read them in UTC.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the event log's partitions: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `set local timezone = 'UTC'`); err != nil {
		return nil, fmt.Errorf("listing the event log's partitions: %w", err)
	}
	rows, err := tx.Query(ctx, `select c.relname, pg_get_expr(c.relpartbound, c.oid)
		from pg_inherits i join pg_class c on c.oid = i.inhrelid
		where i.inhparent = 'events'::regclass order by c.relname`)
	if err != nil {
		return nil, fmt.Errorf("listing the event log's partitions: %w", err)
	}
	defer rows.Close()
	var out []partition
	for rows.Next() {
		var name, bound string
		if err := rows.Scan(&name, &bound); err != nil {
			return nil, fmt.Errorf("listing the event log's partitions: %w", err)
		}
		m := partitionUpper.FindStringSubmatch(bound)
		if m == nil {
			continue // no upper bound (MAXVALUE): never expires
		}
		upper, err := time.Parse("2006-01-02 15:04:05-07", m[1])
		if err != nil {
			e.cfg.Logger.WarnContext(ctx, "cannot read an event log partition's bound; it is kept",
				slog.String("partition", name), slog.String("bound", bound))
			continue
		}
		out = append(out, partition{name: name, upper: upper})
	}
	return out, rows.Err()
}

// dropExpired drops the partitions whose every event is older than the retention, covered by a
// snapshot of its namespace, and not the fire of an execution still in flight. DETACH ...
// CONCURRENTLY does not block the inserts of firing nodes.
func (e *Events) dropExpired(ctx context.Context) ([]string, error) {
	parts, err := e.partitions(ctx)
	if err != nil {
		return nil, err
	}
	cutoff := e.cfg.Now().Add(-e.cfg.Retention)
	var dropped []string
	for _, p := range parts {
		if !p.upper.Before(cutoff) {
			continue
		}
		ok, why, err := e.droppable(ctx, p)
		if err != nil {
			return dropped, err
		}
		if !ok {
			e.cfg.Logger.InfoContext(ctx, "keeping an expired event log partition", slog.String("partition", p.name),
				slog.String("reason", why))
			continue
		}
		if err := e.drop(ctx, p.name); err != nil {
			return dropped, err
		}
		e.cfg.Logger.InfoContext(ctx, "dropped an expired event log partition", slog.String("partition", p.name),
			slog.Time("events_before", p.upper))
		dropped = append(dropped, p.name)
	}
	return dropped, nil
}

func (e *Events) droppable(ctx context.Context, p partition) (bool, string, error) {
	t := pgx.Identifier{p.name}.Sanitize()
	var uncovered bool
	// An event is covered by its namespace's latest snapshot when it is below its seq fence (its
	// transaction id fence, for a snapshot taken before migration 022).
	err := e.pool.QueryRow(ctx, `with s as (select distinct on (sched_name) sched_name, fence, seq_below
			from event_snapshots order by sched_name, fence desc)
		select exists (select 1 from `+t+` e left join s on s.sched_name = e.sched_name
			where s.fence is null or e.seq >= s.seq_below or (s.seq_below is null and e.xid >= s.fence))`).
		Scan(&uncovered)
	if err != nil {
		return false, "", fmt.Errorf("checking partition %s against the snapshots: %w", p.name, err)
	}
	if uncovered {
		return false, "a namespace's events in it are newer than its latest snapshot", nil
	}
	var inFlight bool
	if err := e.pool.QueryRow(ctx, `select exists (select 1 from fired_triggers
		where state = 'EXECUTING' and fired_time < $1)`, p.upper.Add(firedMargin)).Scan(&inFlight); err != nil {
		return false, "", fmt.Errorf("checking partition %s against the executions in flight: %w", p.name, err)
	}
	if inFlight {
		return false, "it may hold the JobFired of an execution still in flight", nil
	}
	return true, "", nil
}

// drop detaches a partition concurrently and drops it; a detach interrupted earlier is finished.
func (e *Events) drop(ctx context.Context, name string) error {
	t := pgx.Identifier{name}.Sanitize()
	_, err := e.pool.Exec(ctx, `alter table events detach partition `+t+` concurrently`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.Contains(pgErr.Message, "pending detach") {
		_, err = e.pool.Exec(ctx, `alter table events detach partition `+t+` finalize`)
	}
	if err != nil {
		return fmt.Errorf("detaching event log partition %s: %w", name, err)
	}
	if _, err := e.pool.Exec(ctx, `drop table `+t); err != nil {
		return fmt.Errorf("dropping event log partition %s: %w", name, err)
	}
	return nil
}
