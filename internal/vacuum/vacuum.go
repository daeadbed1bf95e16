// Package vacuum keeps the tables a busy flow rewrites small between autovacuum's visits.
//
// Every fire of a repeating trigger writes a new version of its row (the next fire time is
// indexed, so the update is never HOT), and every execution inserts and deletes a fired row. At
// 5,000 fires a second that is 5,000 dead rows a second in each table. Autovacuum visits a
// database at most once a minute (autovacuum_naptime), so between its visits the tables and
// their indexes grow: in a steady 5,000/s for 40 s on the bench's machine, triggers went from
// 188 pages to 1,706 (5,000 live rows, 194,000 dead), its acquire index from 14 pages to 483,
// and the fire lateness with them; when autovacuum came, it had a minute's dead rows to clean
// at once (docs/performance.md, "What limits each figure"). A Vacuumer looks every Interval
// and vacuums each of these tables whose dead rows have reached half its live ones (and
// MinDead): a few thousand rows at a time, while they are still in the cache.
//
// One node of a database vacuums at a time (a session advisory lock); the others skip that
// pass. VACUUM needs the table's owner: a node whose database user does not own a table says
// so once and leaves that table to autovacuum.
package vacuum

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/testsignal"
)

const (
	// IntervalDefault is how often a node looks at the tables' dead rows.
	IntervalDefault = 3 * time.Second
	// MinDeadDefault is the fewest dead rows worth a VACUUM of its own.
	MinDeadDefault = 1000
)

// Tables are the tables the fire path rewrites: a repeating trigger's row, an execution's
// fired row, a one-shot trigger's job.
var Tables = []string{"triggers", "fired_triggers", "job_details"}

// LockName names the advisory lock that keeps one node of a database vacuuming (store.TryTurn).
const LockName = "agate:vacuum"

// Config configures a Vacuumer.
type Config struct {
	// Interval is the wait between passes. Default IntervalDefault.
	Interval time.Duration
	// MinDead is the fewest dead rows that make a table worth vacuuming. Default MinDeadDefault.
	MinDead int64
	// Busy, when set, says the node's fires are waiting (a backlog to fire, or fires waiting
	// for a worker): a pass then does nothing, and the dead rows wait for the next one. A
	// VACUUM takes the cores a burst's fires need, and autovacuum or a later pass cleans the
	// rows a burst leaves.
	Busy   func() bool
	Logger *slog.Logger
}

// Vacuumer vacuums the fire path's tables when they have many dead rows.
type Vacuumer struct {
	cfg     Config
	pool    *pgxpool.Pool
	tables  []string // the Tables this node may vacuum (its user owns them)
	checked bool

	TestSignals TestSignals
}

// TestSignals tell tests what the vacuumer did.
type TestSignals struct {
	Pass testsignal.Signal[[]string] // a pass ended (the tables it vacuumed)
}

// New builds a Vacuumer.
func New(cfg Config, pool *pgxpool.Pool) *Vacuumer {
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.MinDead = cmp.Or(cfg.MinDead, MinDeadDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Vacuumer{cfg: cfg, pool: pool}
}

// Run makes a pass every Interval until ctx ends. A failed pass (the database restarting) is
// logged and tried again at the next one: autovacuum still runs meanwhile.
func (v *Vacuumer) Run(ctx context.Context) error {
	t := time.NewTicker(v.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		done, err := v.Pass(ctx)
		if err != nil && ctx.Err() == nil {
			v.cfg.Logger.WarnContext(ctx, "vacuuming the scheduler's tables failed; trying again at the next pass (autovacuum still runs)",
				slog.Any("error", err), slog.Duration("next_pass_in", v.cfg.Interval))
		}
		v.TestSignals.Pass.Signal(done)
	}
}

// Pass vacuums the tables whose dead rows have reached half their live ones and MinDead, and
// returns their names. It does nothing while another node of the database is vacuuming, or
// while Busy says the node's fires are waiting.
func (v *Vacuumer) Pass(ctx context.Context) ([]string, error) {
	if v.cfg.Busy != nil && v.cfg.Busy() {
		return nil, nil
	}
	conn, err := v.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if !v.checked {
		if err := v.check(ctx, conn.Conn()); err != nil {
			return nil, err
		}
	}
	if len(v.tables) == 0 {
		return nil, nil
	}
	release, mine, err := store.TryTurn(ctx, conn, LockName)
	if err != nil || !mine {
		return nil, err
	}
	defer release()
	rows, err := conn.Query(ctx, `select relname from pg_stat_user_tables
		where schemaname = current_schema() and relname = any($1) and n_dead_tup >= greatest($2, n_live_tup / 2)
		order by relname`, v.tables, v.cfg.MinDead)
	if err != nil {
		return nil, fmt.Errorf("reading the tables' dead rows: %w", err)
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the tables' dead rows: %w", err)
	}
	var done []string
	for _, table := range due {
		start := time.Now()
		// SKIP_LOCKED: never queue behind a lock (a schema migration); TRUNCATE false: giving
		// the empty pages at the end back to the system takes a lock every fire would wait for.
		if _, err := conn.Exec(ctx, `vacuum (skip_locked, truncate false) `+pgx.Identifier{table}.Sanitize()); err != nil {
			return done, fmt.Errorf("vacuuming %s: %w", table, err)
		}
		done = append(done, table)
		v.cfg.Logger.DebugContext(ctx, "vacuumed a table of dead rows", slog.String("table", table),
			slog.Duration("took", time.Since(start)))
	}
	return done, nil
}

// check keeps the Tables this node's database user owns, and says once which it leaves to
// autovacuum.
func (v *Vacuumer) check(ctx context.Context, conn *pgx.Conn) error {
	rows, err := conn.Query(ctx, `select c.relname, pg_has_role(c.relowner, 'USAGE') from pg_class c
		where c.relnamespace = current_schema()::regnamespace and c.relname = any($1) order by c.relname`, Tables)
	if err != nil {
		return fmt.Errorf("checking who owns the scheduler's tables: %w", err)
	}
	type owned struct {
		Table string
		Owns  bool
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[owned])
	if err != nil {
		return fmt.Errorf("checking who owns the scheduler's tables: %w", err)
	}
	var others []string
	for _, o := range found {
		if o.Owns {
			v.tables = append(v.tables, o.Table)
		} else {
			others = append(others, o.Table)
		}
	}
	if len(found) == 0 {
		return errors.New("the scheduler's tables are not in the connection's schema (search_path)")
	}
	if len(others) > 0 {
		v.cfg.Logger.InfoContext(ctx, "not vacuuming tables the database user does not own; autovacuum alone keeps them",
			slog.Any("tables", others))
	}
	v.checked = true
	return nil
}
