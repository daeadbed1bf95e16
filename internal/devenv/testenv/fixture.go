package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
	"github.com/agatesched/agate/schemas"
)

// MigratedDatabase is [DatabaseFromTemplate] with Agate's schema: a fresh database with every
// migration applied, copied from a template made once per set of migration files.
//
// When the test ends, after its own cleanups, every trigger must have its job: the rule no foreign
// key checks since migration 011, kept by the writes themselves.
func MigratedDatabase(t testing.TB) string {
	t.Helper()
	url := DatabaseFromTemplate(t, migrationsKey(t), func(ctx context.Context, url string) error {
		pool, err := store.Open(ctx, url, 2)
		if err != nil {
			return err
		}
		defer pool.Close()
		return store.Migrate(ctx, pool)
	})
	t.Cleanup(func() { checkTriggersHaveJobs(t, url) })
	return url
}

// checkTriggersHaveJobs fails t when a trigger of the database has no job.
func checkTriggersHaveJobs(t testing.TB, url string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("testenv: checking that every trigger has its job: %v", err)
		return
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `select t.sched_name || '/' || t.trigger_group || '.' || t.trigger_name || ' of job ' || t.job_group || '.' || t.job_name
		from triggers t
		where not exists (select 1 from job_details j
		                  where j.sched_name = t.sched_name and j.job_group = t.job_group and j.job_name = t.job_name)
		limit 10`)
	if err != nil {
		t.Errorf("testenv: checking that every trigger has its job: %v", err)
		return
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("testenv: checking that every trigger has its job: %v", err)
		return
	}
	if len(orphans) > 0 {
		t.Errorf("testenv: triggers without their job at the end of the test: %v", orphans)
	}
}

// migrationsKey names the migrated template database; it changes when a migration does.
func migrationsKey(t testing.TB) string {
	h := sha256.New()
	err := fs.WalkDir(schemas.SQL, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(schemas.SQL, path)
		h.Write([]byte(path))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return "agate-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// Fixture is a migrated database and a namespace with its lock rows, for the tests of one step.
// Its helpers write rows as the command step would, so a step can be tested without the others.
type Fixture struct {
	Pool  *pgxpool.Pool
	Locks store.Locks
}

// NewFixture makes a migrated database and a namespace with partitions lock partitions (0 or 1:
// global mode).
func NewFixture(t testing.TB, partitions int) *Fixture {
	t.Helper()
	pool, err := store.Open(t.Context(), MigratedDatabase(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	locks := store.Locks{Namespace: Namespace(t), Partitions: partitions}
	if err := locks.Ensure(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return &Fixture{Pool: pool, Locks: locks}
}

// Namespace is the fixture's namespace.
func (f *Fixture) Namespace() string { return f.Locks.Namespace }

// Job inserts a job of type noop.
func (f *Fixture) Job(t testing.TB, key events.Key, nonconcurrent bool) {
	t.Helper()
	f.Exec(t, `insert into job_details (sched_name, job_group, job_name, job_type, nonconcurrent) values ($1, $2, $3, 'noop', $4)`,
		f.Namespace(), key.Group, key.Name, nonconcurrent)
}

// Trigger inserts a WAITING trigger of job with the given schedule, first due at next.
func (f *Fixture) Trigger(t testing.TB, key, job events.Key, def trigger.Definition, next time.Time) {
	t.Helper()
	if def.StartAt == nil {
		def.StartAt = &next
	}
	schedule, err := json.Marshal(def)
	if err != nil {
		t.Fatal(err)
	}
	f.Exec(t, `insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule,
		start_time, next_fire_time, state, partition) values ($1, $2, $3, $4, $5, 'simple', $6, $7, $7, 'WAITING', $8)`,
		f.Namespace(), key.Group, key.Name, job.Group, job.Name, schedule, next, store.SlotOf(job.Group, job.Name))
}

// Repeating is a simple schedule firing every interval forever.
func Repeating(interval time.Duration) trigger.Definition {
	return trigger.Definition{Simple: &trigger.SimpleSchedule{Interval: interval.String(), RepeatCount: -1}}
}

// OneShot is a simple schedule firing once.
func OneShot() trigger.Definition {
	return trigger.Definition{Simple: &trigger.SimpleSchedule{RepeatCount: 0}}
}

// Exec runs a statement, failing the test on error.
func (f *Fixture) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := f.Pool.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// State is the state of a trigger, "" when it does not exist.
func (f *Fixture) State(t testing.TB, key events.Key) string {
	t.Helper()
	var state string
	_ = f.Pool.QueryRow(t.Context(), `select state from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
		f.Namespace(), key.Group, key.Name).Scan(&state)
	return state
}

// Count runs a count(*) query whose first parameter is the namespace.
func (f *Fixture) Count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.Pool.QueryRow(t.Context(), sql, append([]any{f.Namespace()}, args...)...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// HoldPartition holds lock partition p in a transaction of its own, as a node stopped in the
// middle of one does, until release, the test's end or store.IdleInTxTimeout (after which the
// server ends it).
func (f *Fixture) HoldPartition(t testing.TB, p int) (release func()) {
	t.Helper()
	holder, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	if err := f.Locks.Partition(t.Context(), holder, p); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := holder.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// WaitLockWaiters waits until n sessions of the fixture's database wait for a row lock.
func (f *Fixture) WaitLockWaiters(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for f.Count(t, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and $1 <> ''`) < n {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d sessions wait for a lock after 10s", n)
		}
		time.Sleep(10 * time.Millisecond) // another session's state: no signal to wait on
	}
}

// EventTypes lists the types of the namespace's logged events, in log order.
func (f *Fixture) EventTypes(t testing.TB) []string {
	t.Helper()
	rows, err := f.Pool.Query(t.Context(), `select type from events where sched_name = $1 order by seq`, f.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var types []string
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		types = append(types, typ)
	}
	return types
}

// Clock is a settable clock for the steps' Now.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// FreezeInPartition holds lock partition p as a node frozen in the middle of a transaction does,
// for good: the transaction is never ended by the test, only by the server once it has been
// idle for idle (its connection's idle_in_transaction_session_timeout).
func (f *Fixture) FreezeInPartition(t testing.TB, p int, idle time.Duration) {
	t.Helper()
	cfg := f.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams[store.IdleInTxParam] = strconv.FormatInt(idle.Milliseconds(), 10)
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Locks.Partition(t.Context(), tx, p); err != nil {
		t.Fatal(err)
	}
}
