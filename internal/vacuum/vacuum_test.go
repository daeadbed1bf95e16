package vacuum_test

import (
	"slices"
	"testing"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/vacuum"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// vacuums is how many times PostgreSQL has vacuumed table by hand (not autovacuum).
func vacuums(t *testing.T, f *testenv.Fixture, table string) int {
	t.Helper()
	var n int
	if err := f.Pool.QueryRow(t.Context(), `select vacuum_count from pg_stat_user_tables
		where relname = $1 and schemaname = current_schema()`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// churn inserts and deletes n fired rows and makes the statistics say so at once.
func churn(t *testing.T, f *testenv.Fixture, n int) {
	t.Helper()
	conn, err := f.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{
		`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
			fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
			select $1, gen_random_uuid(), 'g', 't' || i, 'g', 'j', 'n1', now(), now(), 'EXECUTING', false, false, 5
			from generate_series(1, $2) i`,
		`delete from fired_triggers where sched_name = $1 and $2 > 0`,
		`select pg_stat_force_next_flush() where $1 <> '' and $2 > 0`,
	} {
		if _, err := conn.Exec(t.Context(), q, f.Namespace(), n); err != nil {
			t.Fatal(err)
		}
	}
}

// A pass vacuums a table whose dead rows reached the threshold, and only that one; a pass
// while the node's fires wait, or while another node holds the vacuum lock, does nothing.
func TestPassVacuumsTheTablesWithManyDeadRows(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	v := vacuum.New(vacuum.Config{MinDead: 500}, f.Pool)
	churn(t, f, 600)
	before, triggersBefore := vacuums(t, f, "fired_triggers"), vacuums(t, f, "triggers")

	// While the node's fires wait, a pass leaves the dead rows alone.
	busy := vacuum.New(vacuum.Config{MinDead: 500, Busy: func() bool { return true }}, f.Pool)
	if done, err := busy.Pass(t.Context()); err != nil || len(done) != 0 || vacuums(t, f, "fired_triggers") != before {
		t.Errorf("a pass while the fires wait vacuumed %v (%v); want nothing", done, err)
	}

	done, err := v.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(done, "fired_triggers") || slices.Contains(done, "triggers") {
		t.Errorf("the pass vacuumed %v; want fired_triggers (600 dead rows) and not triggers", done)
	}
	if got := vacuums(t, f, "fired_triggers"); got != before+1 {
		t.Errorf("fired_triggers vacuumed %d times after the pass; want %d", got, before+1)
	}
	if got := vacuums(t, f, "triggers"); got != triggersBefore {
		t.Errorf("triggers vacuumed %d times after the pass; want %d (it has no dead rows)", got, triggersBefore)
	}

	// The dead rows are gone: a second pass finds nothing to do.
	if done, err := v.Pass(t.Context()); err != nil || slices.Contains(done, "fired_triggers") {
		t.Errorf("a second pass vacuumed %v (%v); want nothing", done, err)
	}

	// Another node vacuuming: this one skips the pass.
	churn(t, f, 600)
	conn, err := f.Pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(t.Context(), `select pg_advisory_lock(hashtext($1))`, vacuum.LockName); err != nil {
		t.Fatal(err)
	}
	if done, err := v.Pass(t.Context()); err != nil || len(done) != 0 {
		t.Errorf("a pass while another node holds the vacuum lock vacuumed %v (%v); want nothing", done, err)
	}
	if _, err := conn.Exec(t.Context(), `select pg_advisory_unlock(hashtext($1))`, vacuum.LockName); err != nil {
		t.Fatal(err)
	}
	if done, err := v.Pass(t.Context()); err != nil || !slices.Contains(done, "fired_triggers") {
		t.Errorf("a pass after the lock was given back vacuumed %v (%v); want fired_triggers", done, err)
	}
}
