package replay_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestSnapshotIsAPrefixOfTheLog: replay from a snapshot applies the events in the log's order,
// as a replay of the whole log does, even when transactions commit in another order than the
// one they took their transaction ids in. Here the transaction with the lowest id logs last,
// after one with a higher id, while a third with an id between them is still open: a fence on
// transaction ids (the oldest one running) put the later event in the snapshot and the earlier
// one after it, and replay applied them the wrong way round.
func TestSnapshotIsAPrefixOfTheLog(t *testing.T) {
	ctx := t.Context()
	pool, ns := open(t, testenv.MigratedDatabase(t)), testenv.Namespace(t)

	begin := func() pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, `select pg_current_xact_id()`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	first, open, last := begin(), begin(), begin() // transaction ids in this order
	logGroup(t, last, ns, events.TypeGroupPaused, "g")
	commit(t, last)
	logGroup(t, first, ns, events.TypeGroupResumed, "g")
	commit(t, first)
	want, _ := project(t, pool, ns, false)
	if want.PausedGroups["g"] {
		t.Fatal("the whole log says group g is paused: it was paused, then resumed")
	}

	// A snapshot waits for the transactions that may still log before its fence.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := replay.TakeSnapshot(short, pool, ns)
	cancel()
	if err == nil {
		t.Error("a snapshot was taken while a transaction older than its fence was open")
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("snapshot: %v, want it to give up at its deadline", err)
	}
	if got, _ := project(t, pool, ns, true); !reflect.DeepEqual(got.PausedGroups, want.PausedGroups) {
		t.Errorf("from the latest snapshot, paused groups %v; from the whole log %v", got.PausedGroups, want.PausedGroups)
	}

	commit(t, open)
	if _, err := replay.TakeSnapshot(ctx, pool, ns); err != nil {
		t.Fatal(err)
	}
	// One more event after the snapshot, which replay applies on top of it.
	tx := begin()
	logGroup(t, tx, ns, events.TypeGroupPaused, "g")
	commit(t, tx)
	want, _ = project(t, pool, ns, false)
	got, snap := project(t, pool, ns, true)
	if snap.TakenAt.IsZero() {
		t.Fatal("no snapshot to replay from")
	}
	if !reflect.DeepEqual(got.PausedGroups, want.PausedGroups) || !want.PausedGroups["g"] {
		t.Errorf("from the snapshot, paused groups %v; from the whole log %v (g paused)", got.PausedGroups, want.PausedGroups)
	}
}

// TestSnapshotWaitsForTheNewestTransaction: a transaction that reserved a seq below the fence
// and is still open holds back the snapshot, also when its id is the newest one taken, above
// every transaction that has ended. PostgreSQL leaves such a transaction out of a snapshot's
// xmin (it counts only those below xmax, the newest ended id + 1), so a fence read from
// pg_current_snapshot() did not wait for it: the snapshot missed its events, and replay from
// it found later events naming a trigger the log had never created.
func TestSnapshotWaitsForTheNewestTransaction(t *testing.T) {
	ctx := t.Context()
	pool, ns := open(t, testenv.MigratedDatabase(t)), testenv.Namespace(t)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	logGroup(t, tx, ns, events.TypeGroupPaused, "g") // takes its id, then its seq
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	snap, err := replay.TakeSnapshot(short, pool, ns)
	cancel()
	if err == nil {
		t.Fatalf("a snapshot (below seq %d) was taken while a transaction holding a seq below it was open", snap.Below)
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("snapshot: %v, want it to give up at its deadline", err)
	}
	commit(t, tx)
	if _, err := replay.TakeSnapshot(ctx, pool, ns); err != nil {
		t.Fatal(err)
	}
	if got, _ := project(t, pool, ns, true); !got.PausedGroups["g"] {
		t.Errorf("from the latest snapshot, paused groups %v; the log paused g", got.PausedGroups)
	}
}

// open opens a pool on the database at url, closed when the test ends.
func open(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(t.Context(), url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// logGroup logs a GroupPaused or GroupResumed of a group, taking its seq as the outbox does.
func logGroup(t *testing.T, tx pgx.Tx, ns, typ, group string) {
	t.Helper()
	_, err := tx.Exec(t.Context(), `insert into events (seq, id, sched_name, type, source, aggregate, aggregate_id, time, data)
		values ((events_seq_bases(1))[1], gen_random_uuid(), $1, $2, 'agate/test', 'group', $3, now(), json_build_object('group', $3::text))`,
		ns, typ, group)
	if err != nil {
		t.Fatal(err)
	}
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// project replays the namespace's log: from its latest snapshot, if it has one, or the whole
// log.
func project(t *testing.T, pool *pgxpool.Pool, ns string, fromSnapshot bool) (*replay.State, replay.Snapshot) {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	st, snap, _, err := replay.Project(ctx, tx, ns, !fromSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	return st, snap
}

// TestSnapshotFromBeforeMigration22StillServes: a snapshot taken before snapshots were fenced
// by seq keeps its transaction id fence: replay applies the events at or above it, and the next
// snapshot, fenced by seq, is built on it.
func TestSnapshotFromBeforeMigration22StillServes(t *testing.T) {
	ctx := t.Context()
	pool := open(t, testenv.Database(t))
	if err := store.MigrateTo(ctx, pool, 21); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t)
	inTx := func(fn func(pgx.Tx)) {
		t.Helper()
		if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { fn(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	inTx(func(tx pgx.Tx) { logGroup(t, tx, ns, events.TypeGroupPaused, "g") })
	// The snapshot as TakeSnapshot stored it then: g paused, fenced at the oldest transaction
	// running (none: the next id).
	st := replay.NewState()
	st.PausedGroups["g"] = true
	body, err := replay.EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into event_snapshots (sched_name, fence, events, state)
		values ($1, pg_snapshot_xmin(pg_current_snapshot()), 1, $2)`, ns, body); err != nil {
		t.Fatal(err)
	}
	inTx(func(tx pgx.Tx) { logGroup(t, tx, ns, events.TypeGroupPaused, "h") })
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}

	got, snap := project(t, pool, ns, true)
	if snap.Below != 0 || snap.Fence == 0 {
		t.Fatalf("replayed from %+v, want the snapshot fenced by transaction id", snap)
	}
	if !got.PausedGroups["g"] || !got.PausedGroups["h"] {
		t.Errorf("paused groups %v, want g (from the snapshot) and h (logged after it)", got.PausedGroups)
	}
	if _, err := replay.TakeSnapshot(ctx, pool, ns); err != nil {
		t.Fatal(err)
	}
	inTx(func(tx pgx.Tx) { logGroup(t, tx, ns, events.TypeGroupResumed, "g") })
	got, snap = project(t, pool, ns, true)
	if snap.Below == 0 {
		t.Fatalf("replayed from %+v, want the new snapshot fenced by seq", snap)
	}
	if got.PausedGroups["g"] || !got.PausedGroups["h"] {
		t.Errorf("paused groups %v, want h alone", got.PausedGroups)
	}
}

// TestSnapshotsTakenAtOnce: snapshots of one namespace taken at the same moment (a node's
// upkeep and an operator's, or two nodes') all succeed, and the latest is the log's projection.
// Taken side by side, two of them could reserve their fences under the same transaction id and
// store their rows under one key, and the later one failed on a serialization error.
func TestSnapshotsTakenAtOnce(t *testing.T) {
	ctx := t.Context()
	pool, ns := open(t, testenv.MigratedDatabase(t)), testenv.Namespace(t)
	const takers, rounds = 4, 5
	for round := range rounds {
		if err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
			logGroup(t, tx, ns, events.TypeGroupPaused, fmt.Sprintf("g%d", round))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make(chan error, takers)
		for range takers {
			go func() {
				<-start
				_, err := replay.TakeSnapshot(ctx, pool, ns)
				errs <- err
			}()
		}
		close(start)
		for range takers {
			if err := <-errs; err != nil {
				t.Errorf("round %d: %v", round, err)
			}
		}
	}
	want, _ := project(t, pool, ns, false)
	got, snap := project(t, pool, ns, true)
	if snap.Below == 0 {
		t.Fatal("no snapshot to replay from")
	}
	if !reflect.DeepEqual(got.PausedGroups, want.PausedGroups) || len(want.PausedGroups) != rounds {
		t.Errorf("from the snapshot, paused groups %v; from the whole log %v", got.PausedGroups, want.PausedGroups)
	}
}

// TestReplayFromStartIgnoresTheSnapshots: a snapshot that lacks an event (as one taken by the
// fence of before TestSnapshotWaitsForTheNewestTransaction could) makes replay from it differ
// from the live tables; Options.FromStart replays the whole log and agrees with them, which
// tells such a snapshot from a write path that logged wrong.
func TestReplayFromStartIgnoresTheSnapshots(t *testing.T) {
	ctx := t.Context()
	pool, ns := open(t, testenv.MigratedDatabase(t)), testenv.Namespace(t)
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error {
		logGroup(t, tx, ns, events.TypeGroupPaused, "g")
		_, err := tx.Exec(ctx, `insert into paused_trigger_grps (sched_name, trigger_group) values ($1, 'g')`, ns)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	body, err := replay.EncodeState(replay.NewState()) // the pause is below its fence, but not in it
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into event_snapshots (sched_name, fence, seq_below, events, state)
		values ($1, pg_current_xact_id(), nextval('events_seq_seq'), 0, $2)`, ns, body); err != nil {
		t.Fatal(err)
	}
	rep, err := replay.Run(ctx, pool, ns, replay.Options{})
	if err != nil || rep.Snapshot.TakenAt.IsZero() || len(rep.Differences) != 1 ||
		rep.Differences[0].String() != "paused_trigger_grps g: only in the live table" {
		t.Fatalf("replay from the snapshot that lacks the pause: %+v, %v; want the paused group only in the live table", rep, err)
	}
	rep, err = replay.Run(ctx, pool, ns, replay.Options{FromStart: true})
	if err != nil || !rep.Snapshot.TakenAt.IsZero() || rep.Events != 1 || !rep.Equal() {
		t.Fatalf("replay from the start: %+v, %v; want the one event applied and the tables equal", rep, err)
	}
}
