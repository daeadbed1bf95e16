package outbox

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
)

// A transaction logged before migration 016 and not yet swept (its node died before
// JetStream stored its events) is still published after it: the migration records the seqs
// its events span, by which the sweep now reads them, and drops the index it read them by.
// Its data, jsonb until migration 015, is json after it and reads the same.
func TestMigrationsKeepTheSweepsPendingTransactions(t *testing.T) {
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.Database(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.MigrateTo(ctx, pool, 14); err != nil {
		t.Fatal(err)
	}

	ns := testenv.Namespace(t)
	if err := (store.Locks{Namespace: ns}).Ensure(ctx, pool); err != nil {
		t.Fatal(err)
	}
	subject := events.Subjects(ns).Evt("trigger")
	// What Append wrote at migration 14: the events (the seq from the column's default) and
	// the transaction's row, which no node vouches for. A row without a subject sits between.
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `insert into events (id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data)
			select gen_random_uuid(), $1, $2, $3, 'trigger', 'g.t' || i, case when i = 2 then null else $4 end,
			       now() - interval '1 hour', jsonb_build_object('trigger', jsonb_build_object('group', 'g', 'name', 't' || i))
			from generate_series(1, 3) i`, ns, events.TypeTriggerScheduled, events.Source(ns, "gone"), subject)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `insert into outbox_txs (sched_name, xid, source, events, time)
			values ($1, pg_current_xact_id(), '', 2, now() - interval '1 hour')`, ns)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var from, to int64
	if err := pool.QueryRow(ctx, `select seq_from, seq_to from outbox_txs where sched_name = $1`, ns).Scan(&from, &to); err != nil {
		t.Fatal(err)
	}
	if to-from < 2 {
		t.Fatalf("outbox_txs records seqs %d to %d for three events, the first and the last with a subject", from, to)
	}
	_, js := testenv.JetStream(t, testenv.NATS(t))
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond}, pool, js)
	if n, err := relay.SweepOnce(ctx); err != nil || n != 2 {
		t.Fatalf("swept %d events (err %v), want the transaction's 2 with a subject", n, err)
	}
	if got := streamEvents(t, js, ns); got != 2 {
		t.Fatalf("stream holds %d events, want 2", got)
	}
	var name string
	if err := pool.QueryRow(ctx, `select data->'trigger'->>'name' from events where sched_name = $1 order by seq desc limit 1`,
		ns).Scan(&name); err != nil || name != "t3" {
		t.Fatalf("the last event's trigger is %q (err %v), want t3", name, err)
	}
}
