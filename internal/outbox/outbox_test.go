package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func setup(t *testing.T) (*pgxpool.Pool, jetstream.JetStream, string) {
	t.Helper()
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.Database(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := store.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t)
	if err := (store.Locks{Namespace: ns}).Ensure(ctx, pool); err != nil {
		t.Fatal(err)
	}
	_, js := testenv.JetStream(t, testenv.NATS(t))
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	return pool, js, ns
}

func appendOne(t *testing.T, ctx context.Context, tx pgx.Tx, ns, name string) events.Event {
	t.Helper()
	ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "test"), events.AggregateTrigger, "g."+name,
		events.Subjects(ns).Evt("trigger"), time.Now().Add(-time.Hour), map[string]string{"name": name})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := appendEvents(ctx, tx, ns, []events.Event{ev}, nil); err != nil {
		t.Fatal(err)
	}
	return ev
}

// streamCount is how many messages stream holds, and how many events they hold (a message may be
// a batch).
func streamCount(t *testing.T, js jetstream.JetStream, stream string) (msgs, evs uint64) {
	t.Helper()
	ctx := t.Context()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs = info.State.Msgs
	if msgs == 0 {
		return 0, 0
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(int(msgs))
	if err != nil {
		t.Fatal(err)
	}
	read := uint64(0)
	for m := range batch.Messages() {
		bodies, err := events.Bodies(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		evs += uint64(len(bodies))
		read++
	}
	if read != msgs {
		t.Fatalf("read %d of the stream's %d messages (%v)", read, msgs, batch.Error())
	}
	return msgs, evs
}

// streamEvents is how many events the namespace's EVENTS stream holds.
func streamEvents(t *testing.T, js jetstream.JetStream, ns string) uint64 {
	t.Helper()
	_, evs := streamCount(t, js, events.StreamEvents(ns))
	return evs
}

// The sweep publishes what nobody published, in log order, never skips a row whose transaction
// committed after a later one (the xid fence), and never publishes a row twice into the stream.
func TestSweepPublishesLeftoversWithoutSkipping(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond}, pool, js)

	// A slow transaction takes its seq first and commits last.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Rollback(context.Background()) }()
	appendOne(t, ctx, slow, ns, "slow")
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { appendOne(t, ctx, tx, ns, "fast"); return nil }); err != nil {
		t.Fatal(err)
	}
	n, err := relay.SweepOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("swept %d events while an older transaction was open; the fence must hold them back", n)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err = relay.SweepOnce(ctx); err != nil || n != 2 {
		t.Fatalf("swept %d events (err %v), want both", n, err)
	}
	if n, err = relay.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep published %d events (err %v), want 0", n, err)
	}
	if got := streamEvents(t, js, ns); got != 2 {
		t.Fatalf("stream holds %d events, want 2", got)
	}
	// Publishing the same events again (as the committing node and the sweep both may) is
	// dropped by JetStream's de-duplication on Nats-Msg-Id.
	rows, err := pool.Query(ctx, `select id from events where sched_name = $1`, ns)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[[16]byte])
	if err != nil || len(ids) != 2 {
		t.Fatalf("log has %d events (err %v)", len(ids), err)
	}
	ev, _ := events.New(events.TypeTriggerScheduled, "x", events.AggregateTrigger, "g.slow", events.Subjects(ns).Evt("trigger"), time.Now(), nil)
	ev.ID = ids[0]
	if err := relay.publish(ctx, []events.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if got := streamEvents(t, js, ns); got != 2 {
		t.Fatalf("stream holds %d events after a duplicate publish, want 2", got)
	}
}

// InTx logs the events of a committed transaction and publishes those with a topic once it
// committed; a transaction that fails logs and publishes nothing.
func TestInTxLogsAndPublishesAfterCommit(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	ob := New(Config{Namespace: ns, SweepInterval: time.Hour}, pool, js)
	ob.TestSignals.Published.Init()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- ob.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	newEvent := func(topic string) events.Event {
		ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "test"), events.AggregateTrigger, "g.t", topic, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	failed := errors.New("the change failed")
	if err := ob.InTx(ctx, func(tx *Tx) error { tx.Append(newEvent(events.Subjects(ns).Evt("trigger"))); return failed }); !errors.Is(err, failed) {
		t.Fatalf("InTx returned %v, want the function's error", err)
	}
	if err := ob.InTx(ctx, func(tx *Tx) error {
		tx.Append(newEvent(events.Subjects(ns).Evt("trigger")), newEvent(""))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n := ob.TestSignals.Published.Wait(t); n != 1 {
		t.Fatalf("published %d events, want the one with a topic", n)
	}
	var logged int
	if err := pool.QueryRow(ctx, `select count(*) from events where sched_name = $1`, ns).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != 2 {
		t.Fatalf("the log holds %d events, want the committed transaction's 2", logged)
	}
	if got := streamEvents(t, js, ns); got != 1 {
		t.Fatalf("stream holds %d events, want 1", got)
	}
}

// A transaction's events go in batches, by subject: at most EventBatch a message for the
// EVENTS stream and FireBatch for FIRED; the sweep, publishing the same transaction again (its
// node never vouched for it), forms the same batches under the same ids, and JetStream drops the
// copies. With batches of 1 every event goes alone.
func TestEventsOfATransactionShareMessages(t *testing.T) {
	for _, tc := range []struct {
		batch, evtMsgs, firedMsgs int
	}{{batch: 2, evtMsgs: 3, firedMsgs: 3}, {batch: 1, evtMsgs: 5, firedMsgs: 4}} {
		t.Run(fmt.Sprintf("batch=%d", tc.batch), func(t *testing.T) {
			pool, js, ns := setup(t)
			ctx := t.Context()
			cfg := Config{Namespace: ns, InstanceID: "n1", SweepInterval: time.Hour, EventBatch: tc.batch, FireBatch: tc.batch}
			ob := New(cfg, pool, js)
			ob.TestSignals.Published.Init()
			runCtx, cancel := context.WithCancel(ctx)
			done := make(chan error)
			go func() { done <- ob.Run(runCtx) }()
			defer func() { cancel(); <-done }()

			subj := events.Subjects(ns)
			var evs []events.Event
			for i, topic := range []string{subj.Evt("trigger"), subj.Evt("job"), subj.Fired("noop"), subj.Evt("trigger"),
				subj.Fired("noop"), subj.Fired("http"), subj.Evt("trigger"), subj.Fired("noop"), subj.Evt("job")} {
				ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "n1"), events.AggregateTrigger,
					fmt.Sprintf("g.t%d", i), topic, time.Now(), nil)
				if err != nil {
					t.Fatal(err)
				}
				evs = append(evs, ev)
			}
			if err := ob.InTx(ctx, func(tx *Tx) error { tx.Append(evs...); return nil }); err != nil {
				t.Fatal(err)
			}
			if n := ob.TestSignals.Published.Wait(t); n != len(evs) {
				t.Fatalf("published %d events, want %d", n, len(evs))
			}
			// EVENTS: trigger events 0, 3 | 6 and job events 1, 8; FIRED: noop fires 2, 4 | 7 and
			// the http fire 5.
			check := func(when string) {
				t.Helper()
				if msgs, n := streamCount(t, js, events.StreamEvents(ns)); msgs != uint64(tc.evtMsgs) || n != 5 {
					t.Fatalf("%s EVENTS holds %d events in %d messages, want 5 in %d", when, n, msgs, tc.evtMsgs)
				}
				if msgs, n := streamCount(t, js, events.StreamFired(ns)); msgs != uint64(tc.firedMsgs) || n != 4 {
					t.Fatalf("%s FIRED holds %d events in %d messages, want 4 in %d", when, n, msgs, tc.firedMsgs)
				}
			}
			check("published by the node,")
			relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond, EventBatch: tc.batch, FireBatch: tc.batch}, pool, js)
			if n, err := relay.SweepOnce(ctx); err != nil || n != len(evs) {
				t.Fatalf("swept %d events (err %v), want the %d nobody vouched for", n, err, len(evs))
			}
			check("after the sweep")
		})
	}
}

// The sweep goes in xid order as numbers, also when xids gain a digit. Sorted as text, "1001"
// comes before "987": with the older row still too young to sweep, the sweep published the
// newer one, moved its cursor past the older row, and never published it. This lost fires
// whenever the committing node's publish failed while xids crossed a power of ten.
func TestSweepOrdersXIDsAsNumbers(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	relay := New(Config{Namespace: ns, SweepDelay: 500 * time.Millisecond}, pool, js)
	// The older row is young for the first sweeps.
	young, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "test"), events.AggregateTrigger, "g.older",
		events.Subjects(ns).Evt("trigger"), time.Now().Add(time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { _, err := appendEvents(ctx, tx, ns, []events.Event{young}, nil); return err }); err != nil {
		t.Fatal(err)
	}
	var older int64
	if err := pool.QueryRow(ctx, `select xid::text::bigint from events where sched_name = $1`, ns).Scan(&older); err != nil {
		t.Fatal(err)
	}
	// Use up transaction ids until they have one more digit than the older row's.
	next := int64(10)
	for next <= older {
		next *= 10
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`do $$ begin for i in 1..%d loop perform pg_current_xact_id(); commit; end loop; end $$`, next-older)); err != nil {
		t.Fatal(err)
	}
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { appendOne(t, ctx, tx, ns, "newer"); return nil }); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for streamEvents(t, js, ns) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the sweep published %d of the 2 events (xids %d and ≥ %d)", streamEvents(t, js, ns), older, next)
		}
		if _, err := relay.SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the poll step while the older row ages
	}
}

// The sweep stops before the first transaction to publish that is still young (its own node may
// be publishing it), with its cursor after the transaction read just before it (another
// namespace's transactions are its own sweep's); the young one goes once it aged, and the sweep
// forgets the transactions it passed.
func TestSweepStopsBeforeAYoungRow(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	other := ns + "-other"
	logOne := func(ns, name string, at time.Time) {
		t.Helper()
		ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "test"), events.AggregateTrigger, "g."+name,
			events.Subjects(ns).Evt("trigger"), at, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { _, err := appendEvents(ctx, tx, ns, []events.Event{ev}, nil); return err }); err != nil {
			t.Fatal(err)
		}
	}
	position := func(where string, args ...any) string {
		t.Helper()
		var p string
		if err := pool.QueryRow(ctx, `select xid::text || '/9223372036854775807' from events `+where, args...).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cursor := func() string {
		t.Helper()
		var p string
		if err := pool.QueryRow(ctx, `select last_xid::text || '/' || last_seq from outbox_cursor where sched_name = $1`, ns).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	relay := New(Config{Namespace: ns, SweepDelay: 500 * time.Millisecond}, pool, js)
	old := time.Now().Add(-time.Hour)
	logOne(ns, "a", old)
	logOne(other, "b", old)
	logOne(ns, "young", time.Now().Add(time.Second))
	logOne(ns, "c", old)

	if n, err := relay.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("swept %d events (err %v), want a alone", n, err)
	}
	if got, want := cursor(), position(`where sched_name = $1 and aggregate_id = 'g.a'`, ns); got != want {
		t.Fatalf("cursor at %s, want %s: after the transaction read just before the young one", got, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for streamEvents(t, js, ns) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the sweep published %d of the 3 events", streamEvents(t, js, ns))
		}
		if _, err := relay.SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the poll step while the young row ages
	}
	if got, want := cursor(), position(`where sched_name = $1 and aggregate_id = 'g.c'`, ns); got != want {
		t.Fatalf("cursor at %s, want %s: after the last transaction", got, want)
	}
	var left int
	if err := pool.QueryRow(ctx, `select count(*) from outbox_txs where sched_name = $1`, ns).Scan(&left); err != nil || left != 0 {
		t.Fatalf("outbox_txs holds %d transactions the cursor passed (err %v), want none", left, err)
	}
}

// The sweep publishes only what no live node vouches for: the events a node published itself
// and vouched for at check-in are passed over, those of a node that could not publish them
// (here one without JetStream) are published, and rows of an earlier run of the same instance
// id are never vouched for by the new run.
func TestSweepSkipsWhatANodeVouchedFor(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	join := func(instance string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms, published_from)
			values ($1, $2, now(), 1000, pg_current_xact_id())
			on conflict (sched_name, instance_id) do update set published_from = pg_current_xact_id(), published_below = null`,
			ns, instance); err != nil {
			t.Fatal(err)
		}
	}
	checkIn := func(instance string, ob *Outbox) {
		t.Helper()
		if _, err := pool.Exec(ctx, `update scheduler_state set published_below = $3::text::xid8 where sched_name = $1 and instance_id = $2`,
			ns, instance, strconv.FormatUint(ob.PublishedBelow(), 10)); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(ob *Outbox, instance string, n int) {
		t.Helper()
		if err := ob.InTx(ctx, func(tx *Tx) error {
			for i := range n {
				ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, instance), events.AggregateTrigger,
					fmt.Sprintf("g.%s-%d", instance, i), events.Subjects(ns).Evt("trigger"), time.Now().Add(-time.Hour), nil)
				if err != nil {
					return err
				}
				tx.Append(ev)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// n0 ran before: it committed an event and died before publishing it (no JetStream here).
	join("n1")
	commit(New(Config{Namespace: ns, InstanceID: "n1"}, pool, nil), "n1", 1)

	// n1 starts again (same instance id) and publishes its own events.
	join("n1")
	ob1 := New(Config{Namespace: ns, InstanceID: "n1", SweepInterval: time.Hour}, pool, js)
	ob1.TestSignals.Published.Init()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- ob1.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	commit(ob1, "n1", 3)
	if n := ob1.TestSignals.Published.Wait(t); n != 3 {
		t.Fatalf("n1 published %d events, want 3", n)
	}
	// n2 commits two events it cannot publish.
	join("n2")
	ob2 := New(Config{Namespace: ns, InstanceID: "n2"}, pool, nil)
	commit(ob2, "n2", 2)
	checkIn("n1", ob1)
	checkIn("n2", ob2)

	relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond}, pool, js)
	if n, err := relay.SweepOnce(ctx); err != nil || n != 3 {
		t.Fatalf("swept %d events (err %v), want 3: the earlier run's one and n2's two", n, err)
	}
	if got := streamEvents(t, js, ns); got != 6 {
		t.Fatalf("stream holds %d events, want all 6", got)
	}
	var logged int
	if err := pool.QueryRow(ctx, `select count(*) from events e, outbox_cursor c
		where e.sched_name = $1 and c.sched_name = $1 and (e.xid, e.seq) <= (c.last_xid, c.last_seq)`, ns).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != 6 {
		t.Fatalf("the cursor passed %d events, want all 6", logged)
	}
}

// OnCommit's functions run once the transaction committed, in order; not when it failed, nor
// when the commit itself fails, nor those of a savepoint that rolled back.
func TestOnCommitRunsOnlyWhatCommitted(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	ob := New(Config{Namespace: ns, SweepInterval: time.Hour}, pool, js)
	var ran []string
	note := func(s string) func() { return func() { ran = append(ran, s) } }

	failed := errors.New("the change failed")
	if err := ob.InTx(ctx, func(tx *Tx) error { tx.OnCommit(note("failed tx")); return failed }); !errors.Is(err, failed) {
		t.Fatalf("InTx returned %v, want the function's error", err)
	}
	// A deferred constraint fails at commit: the function returned nil, the commit did not happen.
	if err := ob.InTx(ctx, func(tx *Tx) error {
		tx.OnCommit(note("failed commit"))
		_, err := tx.Exec(ctx, `create temporary table agate_commit_fails (id int primary key deferrable initially deferred) on commit drop;
			insert into agate_commit_fails values (1), (1)`)
		return err
	}); err == nil {
		t.Fatal("the commit of a transaction breaking a deferred constraint succeeded")
	}
	if err := ob.InTx(ctx, func(tx *Tx) error {
		tx.OnCommit(note("first"))
		_ = tx.Savepoint(ctx, func(tx *Tx) error { tx.OnCommit(note("rolled back")); return failed })
		if err := tx.Savepoint(ctx, func(tx *Tx) error { tx.OnCommit(note("kept")); return nil }); err != nil {
			return err
		}
		tx.OnCommit(note("last"))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(ran); got != "[first kept last]" {
		t.Fatalf("ran %s, want [first kept last]", got)
	}
}

// The log's appends take their seqs a block at a time (migration 013): the block events_seq_at
// numbers rows in must be the sequence's increment, or two statements would share seqs. One
// append of more than a block, from the bus and not, numbers every event apart and in its order.
func TestAppendTakesSeqsABlockAtATime(t *testing.T) {
	pool, _, ns := setup(t)
	ctx := t.Context()
	const seqBlock = 4096
	var increment, secondBlock int64
	if err := pool.QueryRow(ctx, `select increment_by, events_seq_at(array[0, 1000000]::bigint[], $1)
		from pg_sequences where sequencename = 'events_seq_seq'`, seqBlock+1).Scan(&increment, &secondBlock); err != nil {
		t.Fatal(err)
	}
	if increment != seqBlock || secondBlock != 1000000 {
		t.Fatalf("events_seq_seq increments by %d, and events_seq_at numbers row %d at %d (want the second block's base, 1000000): both must use blocks of %d",
			increment, seqBlock+1, secondBlock, seqBlock)
	}
	for _, fromBus := range []bool{false, true} {
		n := seqBlock + 100
		evs := make([]events.Event, n)
		mayRepeat := map[uuid.UUID]bool{}
		for i := range evs {
			topic := events.Subjects(ns).Evt("trigger")
			if fromBus {
				topic = ""
			}
			ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "test"), events.AggregateTrigger,
				fmt.Sprintf("bus-%t.%05d", fromBus, i), topic, time.Now(), nil)
			if err != nil {
				t.Fatal(err)
			}
			evs[i] = ev
			if fromBus && i%2 == 0 {
				mayRepeat[ev.ID] = true
			}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := appendEvents(ctx, tx, ns, evs, mayRepeat)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rows, err := pool.Query(ctx, `select seq from events where sched_name = $1 and aggregate_id like $2 order by aggregate_id`,
			ns, fmt.Sprintf("bus-%t.%%", fromBus))
		if err != nil {
			t.Fatal(err)
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		if len(seqs) != n {
			t.Fatalf("from the bus %t: the log holds %d of the %d events appended", fromBus, len(seqs), n)
		}
		for i := 1; i < n; i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("from the bus %t: event %d has seq %d after event %d's %d: not in the append's order", fromBus, i, seqs[i], i-1, seqs[i-1])
			}
		}
	}
}

// A cursor left inside a transaction (the sweep before migration 014 passed rows, not
// transactions) goes on after its row: the transaction's later events are published, the
// earlier ones not again.
func TestSweepGoesOnInsideTheCursorsTransaction(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	var evs []events.Event
	for i := range 3 {
		ev, err := events.New(events.TypeTriggerScheduled, events.Source(ns, "gone"), events.AggregateTrigger,
			fmt.Sprintf("g.t%d", i), events.Subjects(ns).Evt("trigger"), time.Now().Add(-time.Hour), nil)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { _, err := appendEvents(ctx, tx, ns, evs, nil); return err }); err != nil {
		t.Fatal(err)
	}
	// The old sweep passed the first row: the cursor stands on it.
	if _, err := pool.Exec(ctx, `update outbox_cursor c set last_xid = e.xid, last_seq = e.seq
		from events e where c.sched_name = $1 and e.sched_name = $1 and e.id = $2`, ns, evs[0].ID); err != nil {
		t.Fatal(err)
	}
	relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond}, pool, js)
	if n, err := relay.SweepOnce(ctx); err != nil || n != 2 {
		t.Fatalf("swept %d events (err %v), want the 2 after the cursor", n, err)
	}
	if got := streamEvents(t, js, ns); got != 2 {
		t.Fatalf("stream holds %d events, want 2", got)
	}
	if n, err := relay.SweepOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep published %d events (err %v), want 0", n, err)
	}
}
