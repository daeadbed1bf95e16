package retention_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/retention"
)

// appendEvent writes one event of namespace ns in tx, as the outbox does (recorded_at now).
const appendEvent = `insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
	values (gen_random_uuid(), $1, 'agate.job.fired', 'agate/x/n1', 'job', 'g.j', now(), '{}')`

// TestDroppingADayDoesNotBlockTheLog: while an expired day is detached (DETACH ... CONCURRENTLY
// waits for the transactions running when it started), firing nodes go on appending to the
// log; only the detach waits.
func TestDroppingADayDoesNotBlockTheLog(t *testing.T) {
	f := testenv.NewFixture(t, 0)
	ns := f.Namespace()
	ctx := t.Context()
	// The namespace's snapshot is taken first: a snapshot waits for every transaction that may
	// log below its fence, as the open one below may, and the pass takes none (its interval is
	// an hour).
	if _, err := replay.TakeSnapshot(ctx, f.Pool, ns); err != nil {
		t.Fatal(err)
	}

	// A transaction of a firing node, open while the drop starts.
	open, err := f.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(context.Background()) }()
	if _, err := open.Exec(ctx, appendEvent, ns); err != nil {
		t.Fatal(err)
	}

	// Ten days on, the (empty) partition of the days before the log was partitioned is expired.
	upkeep := retention.NewEvents(retention.EventsConfig{Namespace: ns, Retention: 7 * 24 * time.Hour, SnapshotInterval: time.Hour,
		Now: func() time.Time { return time.Now().Add(10 * 24 * time.Hour) }}, f.Pool)
	type result struct {
		dropped []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		dropped, err := upkeep.Pass(context.Background())
		done <- result{dropped, err}
	}()
	// The detach is under way once it waits for the open transaction.
	deadline := time.Now().Add(30 * time.Second)
	detaching := func() bool {
		var n int
		if err := f.Pool.QueryRow(ctx, `select count(*) from pg_stat_activity
			where query like 'alter table events detach partition%' and state = 'active'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	for !detaching() {
		if time.Now().After(deadline) {
			t.Fatal("the detach never started")
		}
		select {
		case r := <-done:
			t.Fatalf("the pass ended before the open transaction did: %v, %v", r.dropped, r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	// Another node appends and commits meanwhile: it does not wait for the detach.
	if _, err := f.Pool.Exec(ctx, appendEvent, ns); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		t.Fatalf("the detach finished while a transaction it must wait for was open: %v, %v", r.dropped, r.err)
	default:
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !slices.Contains(r.dropped, "events_before_partitioning") {
		t.Fatalf("dropped %v, %v; want events_before_partitioning", r.dropped, r.err)
	}
	today := "events_p" + time.Now().UTC().Format("20060102")
	if slices.Contains(r.dropped, today) {
		t.Fatalf("dropped %v: today's partition holds events no snapshot covers", r.dropped)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1`); n != 2 {
		t.Errorf("%d events in the log; want the 2 appended", n)
	}
	var left bool
	if err := f.Pool.QueryRow(ctx, `select to_regclass('events_before_partitioning') is not null`).Scan(&left); err != nil || left {
		t.Errorf("the expired partition is still there (%v)", err)
	}
}
