package retention_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/retention"
	"github.com/agatesched/agate/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// rows inserts n remembered outcomes and n rejected bodies of namespace ns, age old by the
// database clock, with ids prefix0…
func rows(t *testing.T, f *testenv.Fixture, ns, prefix string, n int, age time.Duration) {
	t.Helper()
	f.Exec(t, `insert into commands_seen (sched_name, command_id, outcome, created_at)
		select $1, $2 || i, '{"ok":true}', now() - $3::bigint * interval '1 microsecond' from generate_series(1, $4) i`,
		ns, prefix, age.Microseconds(), n)
	f.Exec(t, `insert into rejected_bodies (sched_name, sha256, body, received_at)
		select $1, sha256(($2 || i)::bytea), 'x', now() - $3::bigint * interval '1 microsecond' from generate_series(1, $4) i`,
		ns, prefix, age.Microseconds(), n)
}

// Rows older than the window go, in batches; younger ones and other namespaces' stay.
func TestPruneDeletesWhatIsOlderThanTheWindow(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	ns := f.Namespace()
	rows(t, f, ns, "old", 2500, 2*time.Hour) // three statements of 1,000
	rows(t, f, ns, "edge", 3, time.Hour+time.Minute)
	rows(t, f, ns, "young", 5, 59*time.Minute)
	rows(t, f, "other", "old", 4, 2*time.Hour)

	p := retention.NewPruner(retention.Config{Namespace: ns, Window: time.Hour}, f.Pool)
	got, err := p.Prune(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got != (retention.Pruned{Commands: 2503, RejectedBodies: 2503}) {
		t.Errorf("pruned %+v; want 2,503 of each", got)
	}
	for _, table := range []string{"commands_seen", "rejected_bodies"} {
		if n := f.Count(t, `select count(*) from `+table+` where sched_name = $1`); n != 5 {
			t.Errorf("%s keeps %d rows of the namespace; want the 5 young ones", table, n)
		}
		var other int
		if err := f.Pool.QueryRow(t.Context(), `select count(*) from `+table+` where sched_name = 'other'`).Scan(&other); err != nil || other != 4 {
			t.Errorf("%s keeps %d rows of another namespace (%v); want its 4", table, other, err)
		}
	}
	if n := f.Count(t, `select count(*) from commands_seen where sched_name = $1 and command_id like 'young%'`); n != 5 {
		t.Errorf("%d young outcomes left; want 5", n)
	}

	// Nothing older: a pass deletes nothing.
	if got, err := p.Prune(t.Context()); err != nil || got != (retention.Pruned{}) {
		t.Errorf("second pass: %+v, %v", got, err)
	}
}

// Nodes pruning at once delete each row once and all succeed.
func TestConcurrentPrunesAreHarmless(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	ns := f.Namespace()
	rows(t, f, ns, "old", 3000, 2*time.Hour)
	type result struct {
		got retention.Pruned
		err error
	}
	results := make(chan result, 3)
	for range cap(results) {
		go func() {
			p := retention.NewPruner(retention.Config{Namespace: ns, Window: time.Hour, Batch: 100}, f.Pool)
			got, err := p.Prune(t.Context())
			results <- result{got, err}
		}()
	}
	var total retention.Pruned
	for range cap(results) {
		r := <-results
		if r.err != nil {
			t.Error(r.err)
		}
		total.Commands += r.got.Commands
		total.RejectedBodies += r.got.RejectedBodies
	}
	if total != (retention.Pruned{Commands: 3000, RejectedBodies: 3000}) {
		t.Errorf("the passes deleted %+v in all; want each row once", total)
	}
	if n := f.Count(t, `select count(*) from commands_seen where sched_name = $1`); n != 0 {
		t.Errorf("%d rows left", n)
	}
}

// Run prunes at start and then every interval, and stops with its context.
func TestRunPrunesAtStartAndAgain(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	ns := f.Namespace()
	rows(t, f, ns, "first", 10, 2*time.Hour)
	p := retention.NewPruner(retention.Config{Namespace: ns, Window: time.Hour, Interval: 50 * time.Millisecond}, f.Pool)
	p.TestSignals.Pass.Init()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if got := p.TestSignals.Pass.Wait(t); got.Commands != 10 {
		t.Errorf("first pass pruned %+v; want 10 commands", got)
	}
	rows(t, f, ns, "second", 7, 2*time.Hour)
	p.TestSignals.Pass.WaitUntil(t, func(got retention.Pruned) bool { return got.Commands == 7 })
}

// The pruning statements find the oldest rows through the indexes of migration 010, never by
// reading a whole table, even on tables never analyzed.
func TestPruneUsesTheTimeIndexes(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	ns := f.Namespace()
	f.Exec(t, `alter table commands_seen set (autovacuum_enabled = false)`)
	f.Exec(t, `alter table rejected_bodies set (autovacuum_enabled = false)`)
	rows(t, f, ns, "young", 20000, time.Minute)
	b, err := os.ReadFile("idempotency.sql")
	if err != nil {
		t.Fatal(err)
	}
	queries := store.ParseQueries(string(b))
	for _, c := range []struct{ table, index, query string }{
		{"commands_seen", "commands_seen_created", "PruneCommandsSeen"},
		{"rejected_bodies", "rejected_bodies_received", "PruneRejectedBodies"},
	} {
		var plan string
		if err := f.Pool.QueryRow(t.Context(), "explain (format json) "+queries.Get(c.query), ns, time.Hour.Microseconds(), 1000).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, `"Seq Scan"`) || !strings.Contains(plan, `"Index Name": "`+c.index+`"`) {
			t.Errorf("%s: the plan does not go through %s:\n%s", c.table, c.index, plan)
		}
	}
}
