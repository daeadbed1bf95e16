package fire_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/fire"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func key(name string) events.Key { return events.Key{Group: "g", Name: name} }

type env struct {
	f      *testenv.Fixture
	clock  *testenv.Clock
	outbox *outbox.Outbox
	firer  *fire.Firer
}

func setup(t *testing.T) *env {
	t.Helper()
	f := testenv.NewFixture(t, 1)
	clock := testenv.NewClock(t0)
	return &env{f: f, clock: clock, outbox: outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil),
		firer: fire.New(fire.Config{Namespace: f.Namespace(), InstanceID: "n1", Now: clock.Now})}
}

// setupRealTime is setup on the real clock, with partitions lock partitions: for the fire queue,
// which waits for claims to come due.
func setupRealTime(t *testing.T, partitions int) *env {
	t.Helper()
	f := testenv.NewFixture(t, partitions)
	return &env{f: f, clock: testenv.NewClock(time.Now()), outbox: outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil),
		firer: fire.New(fire.Config{Namespace: f.Namespace(), InstanceID: "n1", Now: time.Now})}
}

// runQueue runs a fire queue holding claims until the test ends; its Fired signal is ready.
func (e *env) runQueue(t *testing.T, claims ...store.Claim) *fire.Queue {
	t.Helper()
	q := fire.NewQueue(fire.QueueConfig{Namespace: e.f.Namespace(), InstanceID: "n1", Locks: e.f.Locks, Now: time.Now},
		e.outbox, e.firer)
	q.TestSignals.Fired.Init()
	q.Add(claims)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- q.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return q
}

// claim makes a claim of trigger k of job j, due at sched, as acquire would; an ahead claim also
// gets its ACQUIRED trigger and fired row.
func (e *env) claim(t *testing.T, k, j events.Key, sched time.Time, ahead, nonconcurrent bool) store.Claim {
	t.Helper()
	c := store.Claim{FireID: uuid.Must(uuid.NewV7()), TriggerGroup: k.Group, TriggerName: k.Name, JobGroup: j.Group,
		JobName: j.Name, SchedTime: sched, Priority: 5, Nonconcurrent: nonconcurrent, Ahead: ahead}
	if ahead {
		e.f.Exec(t, `update triggers set state = 'ACQUIRED' where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
			e.f.Namespace(), k.Group, k.Name)
		err := e.outbox.InTx(t.Context(), func(tx *outbox.Tx) error {
			return store.InsertFired(t.Context(), tx, e.f.Namespace(), "n1", store.FiredAcquired, t0, []store.Claim{c})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (e *env) fire(t *testing.T, claims ...store.Claim) int {
	t.Helper()
	return e.fireTx(t, true, claims)
}

// fireTx fires claims in a transaction of their own, taking the lock or not.
func (e *env) fireTx(t *testing.T, lock bool, claims []store.Claim) int {
	t.Helper()
	fired := 0
	err := e.outbox.InTx(t.Context(), func(tx *outbox.Tx) error {
		if lock {
			if err := e.f.Locks.All(t.Context(), tx); err != nil {
				return err
			}
		}
		var err error
		fired, err = e.firer.Fire(t.Context(), tx, claims)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return fired
}

func (e *env) nextFire(t *testing.T, k events.Key) time.Time {
	t.Helper()
	var next *time.Time
	_ = e.f.Pool.QueryRow(t.Context(), `select next_fire_time from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
		e.f.Namespace(), k.Group, k.Name).Scan(&next)
	if next == nil {
		return time.Time{}
	}
	return *next
}

// A fire advances the trigger, leaves an EXECUTING fired row and logs JobFired, for claims fired
// at once and claims made ahead alike.
func TestFireAdvancesRecordsAndLogs(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		e := setup(t)
		e.f.Job(t, key("j"), false)
		e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
		c := e.claim(t, key("t"), key("j"), t0, ahead, false)
		if n := e.fire(t, c); n != 1 {
			t.Fatalf("ahead=%v: fired %d, want 1", ahead, n)
		}
		if got := e.nextFire(t, key("t")); !got.Equal(t0.Add(time.Minute)) {
			t.Fatalf("next fire %v, want %v", got, t0.Add(time.Minute))
		}
		if got := e.f.State(t, key("t")); got != store.StateWaiting {
			t.Fatalf("trigger is %s after its fire, want WAITING", got)
		}
		if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and entry_id = $2 and state = 'EXECUTING'`, c.FireID); n != 1 {
			t.Fatalf("%d EXECUTING fired rows for the fire, want 1", n)
		}
		if types := e.f.EventTypes(t); len(types) != 1 || types[0] != events.TypeJobFired {
			t.Fatalf("logged %v, want one JobFired", types)
		}
	}
}

// A claim whose trigger moved on since it was made is dropped with its fired row: never a fire
// for a (trigger, time) that is no longer due.
func TestFireDropsStaleClaims(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	c := e.claim(t, key("t"), key("j"), t0, true, false)
	e.f.Exec(t, `update triggers set next_fire_time = $2 where sched_name = $1`, e.f.Namespace(), t0.Add(time.Hour))
	if n := e.fire(t, c); n != 0 {
		t.Fatalf("fired %d stale claims", n)
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 0 {
		t.Fatalf("%d fired rows left for a dropped claim", n)
	}
	if types := e.f.EventTypes(t); len(types) != 1 || types[0] != events.TypeClaimDropped {
		t.Fatalf("logged %v for a dropped claim, want one ClaimDropped", types)
	}
}

// fireUnlocked fires claims in a transaction that does not take the lock: a node that lost its
// lock (a pause past the check-in grace, a partition taken over), so only the guards stand
// between it and a double fire.
func (e *env) fireUnlocked(t *testing.T, claims ...store.Claim) int {
	t.Helper()
	return e.fireTx(t, false, claims)
}

func (e *env) countEvents(t *testing.T, typ string) int {
	t.Helper()
	return e.f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, typ)
}

// Guard: a claim made ahead fires only while its own fired row (its fire id) is ACQUIRED. Here
// recovery gave claim A back and the trigger was claimed again as B for the same time: A must
// not fire, B must.
func TestFireGuardClaimKeyedByFireID(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	a := e.claim(t, key("t"), key("j"), t0, true, false)
	e.f.Exec(t, `delete from fired_triggers where entry_id = $1`, a.FireID) // given back…
	b := e.claim(t, key("t"), key("j"), t0, true, false)                    // …and claimed again
	if n := e.fireUnlocked(t, a); n != 0 {
		t.Fatalf("a claim whose fired row is gone fired (%d)", n)
	}
	if got := e.f.State(t, key("t")); got != store.StateAcquired {
		t.Fatalf("the lost claim changed the trigger to %s", got)
	}
	if n := e.fireUnlocked(t, b); n != 1 {
		t.Fatalf("the live claim fired %d times, want 1", n)
	}
	if n := e.countEvents(t, events.TypeJobFired); n != 1 {
		t.Fatalf("%d JobFired for one (trigger, time), want 1", n)
	}
}

// Two live claims of one trigger for one time (claimed ahead, paused and resumed, claimed
// again: the first claim's fired row stays) fired in one transaction: the trigger's row is
// updated once, so one fires and the other is dropped.
func TestFireOneTransactionFiresATriggerOnce(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	a := e.claim(t, key("t"), key("j"), t0, true, false)
	b := e.claim(t, key("t"), key("j"), t0, true, false)
	if n := e.fire(t, a, b); n != 1 {
		t.Fatalf("two claims of one trigger in one transaction fired %d times, want 1", n)
	}
	if n := e.countEvents(t, events.TypeJobFired); n != 1 {
		t.Fatalf("%d JobFired for one (trigger, time), want 1", n)
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 1 {
		t.Fatalf("%d fired rows left, want the one that fired", n)
	}
}

// Guard: a trigger advances only from the state and next fire time its claim was made on. Two
// claims of one trigger for one time, fired without the lock one after the other: one fire.
func TestFireGuardTriggerStateAndTime(t *testing.T) {
	for _, ahead := range []bool{false, true} {
		e := setup(t)
		e.f.Job(t, key("j"), false)
		e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
		first := e.claim(t, key("t"), key("j"), t0, ahead, false)
		second := e.claim(t, key("t"), key("j"), t0, ahead, false)
		if n := e.fireUnlocked(t, first) + e.fireUnlocked(t, second); n != 1 {
			t.Fatalf("ahead=%v: two claims of one (trigger, time) fired %d times, want 1", ahead, n)
		}
		if n := e.countEvents(t, events.TypeJobFired); n != 1 {
			t.Fatalf("ahead=%v: %d JobFired, want 1", ahead, n)
		}
		if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 1 {
			t.Fatalf("ahead=%v: %d fired rows, want the one fire's", ahead, n)
		}
	}
}

// A non-concurrent job's other triggers are blocked only by a fire whose guarded update held.
func TestFireBlocksOnlyAfterTheUpdateHeld(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("nc"), true)
	e.f.Trigger(t, key("a"), key("nc"), testenv.Repeating(time.Minute), t0)
	e.f.Trigger(t, key("b"), key("nc"), testenv.Repeating(time.Minute), t0.Add(time.Hour))
	c := e.claim(t, key("a"), key("nc"), t0, false, true)
	e.f.Exec(t, `update triggers set next_fire_time = $2 where sched_name = $1 and trigger_name = 'a'`,
		e.f.Namespace(), t0.Add(time.Second)) // another node fired it meanwhile
	if n := e.fireUnlocked(t, c); n != 0 {
		t.Fatalf("a stale claim fired (%d)", n)
	}
	if got := e.f.State(t, key("b")); got != store.StateWaiting {
		t.Fatalf("the job's other trigger is %s after a fire that did not happen, want WAITING", got)
	}
}

// A trigger whose stored schedule cannot be read goes to ERROR with an event; the other claims
// of the batch fire.
func TestFireUnreadableScheduleGoesToError(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("bad"), key("j"), testenv.Repeating(time.Minute), t0)
	e.f.Trigger(t, key("good"), key("j"), testenv.Repeating(time.Minute), t0)
	e.f.Exec(t, `update triggers set schedule = '{"simple": "every now and then"}' where sched_name = $1 and trigger_name = 'bad'`, e.f.Namespace())
	bad, good := e.claim(t, key("bad"), key("j"), t0, true, false), e.claim(t, key("good"), key("j"), t0, true, false)
	if n := e.fire(t, bad, good); n != 1 {
		t.Fatalf("fired %d, want the good trigger only", n)
	}
	if got := e.f.State(t, key("bad")); got != store.StateError {
		t.Fatalf("the unreadable trigger is %s, want ERROR", got)
	}
	if e.countEvents(t, events.TypeTriggerError) != 1 || e.countEvents(t, events.TypeClaimDropped) != 1 {
		t.Fatalf("logged %v, want a TriggerError and a ClaimDropped besides the JobFired", e.f.EventTypes(t))
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 1 {
		t.Fatalf("%d fired rows, want the good fire's only", n)
	}
}

// A non-concurrent job's fire blocks the trigger and the job's other triggers; a one-shot's fire
// deletes its trigger, its JobFired saying COMPLETE (no TriggerCompleted repeats it), and leaves
// its job and fired row to the execution.
func TestFireBlocksNonconcurrentAndCompletesOneShot(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("nc"), true)
	e.f.Trigger(t, key("a"), key("nc"), testenv.Repeating(time.Minute), t0)
	e.f.Trigger(t, key("b"), key("nc"), testenv.Repeating(time.Minute), t0.Add(time.Second))
	e.f.Job(t, key("once"), false)
	e.f.Trigger(t, key("o"), key("once"), testenv.OneShot(), t0)
	if n := e.fire(t, e.claim(t, key("a"), key("nc"), t0, false, true), e.claim(t, key("o"), key("once"), t0, false, false)); n != 2 {
		t.Fatalf("fired %d, want 2", n)
	}
	for k, want := range map[string]string{"a": store.StateBlocked, "b": store.StateBlocked, "o": ""} {
		if got := e.f.State(t, key(k)); got != want {
			t.Errorf("trigger %s is %q, want %q", k, got, want)
		}
	}
	if n := e.countEvents(t, events.TypeTriggerCompleted); n != 0 {
		t.Errorf("%d TriggerCompleted logged; the one-shot's JobFired says COMPLETE alone", n)
	}
	var state string
	if err := e.f.Pool.QueryRow(t.Context(), `select data->>'triggerState' from events
		where sched_name = $1 and type = $2 and data->'trigger'->>'name' = 'o'`,
		e.f.Namespace(), events.TypeJobFired).Scan(&state); err != nil || state != store.StateComplete {
		t.Errorf("the one-shot's JobFired says triggerState %q (%v), want COMPLETE", state, err)
	}
	if n := e.f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'once'`); n != 1 {
		t.Error("the one-shot's job was deleted by the fire; it stays until the execution ends")
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and trigger_name = 'o' and state = 'EXECUTING'`); n != 1 {
		t.Error("the one-shot's execution has no EXECUTING fired row")
	}
}

// The queue fires an ahead claim when it is due, and gives back what is still queued when it
// stops.
func TestQueueFiresWhenDueAndReleasesOnStop(t *testing.T) {
	e := setup(t)
	start := time.Now().Truncate(time.Millisecond) // PostgreSQL keeps microseconds
	e.clock.Set(start)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("soon"), key("j"), testenv.Repeating(time.Minute), start.Add(50*time.Millisecond))
	e.f.Trigger(t, key("late"), key("j"), testenv.Repeating(time.Minute), start.Add(time.Hour))
	q := fire.NewQueue(fire.QueueConfig{Namespace: e.f.Namespace(), InstanceID: "n1", Locks: e.f.Locks, Now: time.Now},
		e.outbox, e.firer)
	q.TestSignals.Fired.Init()
	q.TestSignals.Released.Init()
	q.Add([]store.Claim{e.claim(t, key("late"), key("j"), start.Add(time.Hour), true, false),
		e.claim(t, key("soon"), key("j"), start.Add(50*time.Millisecond), true, false)})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- q.Run(ctx) }()
	if n := q.TestSignals.Fired.Wait(t); n != 1 {
		t.Fatalf("fired %d, want the claim that came due", n)
	}
	if time.Since(start) < 50*time.Millisecond {
		t.Fatal("fired before the claim was due")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := q.TestSignals.Released.Wait(t); n != 1 {
		t.Fatalf("released %d triggers at stop, want 1", n)
	}
	if got := e.f.State(t, key("late")); got != store.StateWaiting {
		t.Fatalf("the unfired claim's trigger is %s after stop, want WAITING", got)
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and state = 'ACQUIRED'`); n != 0 {
		t.Fatalf("%d ACQUIRED fired rows left after stop", n)
	}
}

// A few due claims fire in one transaction whatever their partitions (a steady flow); more than
// store.SmallBatch fire in a transaction per partition (a burst).
func TestQueueFiresFewClaimsInOneTransaction(t *testing.T) {
	for _, n := range []int{3, store.SmallBatch + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			e := setupRealTime(t, 8)
			f := e.f
			due := time.Now().Truncate(time.Millisecond)
			var claims []store.Claim
			partitions := map[int]bool{}
			for i := range n {
				j := key(fmt.Sprint("j", i))
				e.f.Job(t, j, false)
				e.f.Trigger(t, j, j, testenv.Repeating(time.Minute), due)
				c := e.claim(t, j, j, due, true, false)
				c.Partition = f.Locks.PartitionOf(j.Group, j.Name)
				partitions[c.Partition] = true
				claims = append(claims, c)
			}
			if len(partitions) < 2 {
				t.Fatalf("the claims fall in %d partition; the test needs several", len(partitions))
			}
			q := fire.NewQueue(fire.QueueConfig{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Now: time.Now}, e.outbox, e.firer)
			q.TestSignals.Fired.Init()
			q.Add(claims)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error)
			go func() { done <- q.Run(ctx) }()
			for fired := 0; fired < n; {
				fired += q.TestSignals.Fired.Wait(t)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			want := 1
			if n > store.SmallBatch {
				want = len(partitions)
			}
			if got := f.Count(t, `select count(distinct xid) from events where sched_name = $1 and type = 'agate.job.fired'`); got != want {
				t.Errorf("%d claims in %d partitions fired in %d transactions, want %d", n, len(partitions), got, want)
			}
		})
	}
}

// A partition that another transaction holds (a node stopped in the middle of one) does not
// hold up the claims of the other partitions: they fire, and the held partition's claim fires
// once it is free.
func TestQueueFiresOtherPartitionsWhileOneIsHeld(t *testing.T) {
	e := setupRealTime(t, 8)
	f := e.f
	due := time.Now().Truncate(time.Millisecond)
	byPartition := map[int]store.Claim{}
	for i := 0; len(byPartition) < 2; i++ {
		j := key(fmt.Sprint("j", i))
		p := f.Locks.PartitionOf(j.Group, j.Name)
		if _, ok := byPartition[p]; ok {
			continue
		}
		e.f.Job(t, j, false)
		e.f.Trigger(t, j, j, testenv.Repeating(time.Minute), due)
		c := e.claim(t, j, j, due, true, false)
		c.Partition = p
		byPartition[p] = c
	}
	var held, free store.Claim
	for _, c := range byPartition {
		if held.TriggerName == "" {
			held = c
		} else {
			free = c
		}
	}
	release := f.HoldPartition(t, held.Partition)
	q := e.runQueue(t, []store.Claim{held, free}...)
	if n := q.TestSignals.Fired.Wait(t); n != 1 {
		t.Fatalf("fired %d while partition %d was held, want the claim of partition %d", n, held.Partition, free.Partition)
	}
	for _, c := range []struct {
		claim store.Claim
		want  string
	}{{free, store.StateWaiting}, {held, store.StateAcquired}} {
		if got := f.State(t, key(c.claim.TriggerName)); got != c.want {
			t.Fatalf("trigger of partition %d is %s while partition %d is held, want %s", c.claim.Partition, got, held.Partition, c.want)
		}
	}
	release()
	if n := q.TestSignals.Fired.Wait(t); n != 1 {
		t.Fatalf("fired %d once partition %d was free, want its claim", n, held.Partition)
	}
	if got := f.State(t, key(held.TriggerName)); got != store.StateWaiting {
		t.Fatalf("trigger of partition %d is %s after it fired, want %s", held.Partition, got, store.StateWaiting)
	}
}

// A node frozen in the middle of a transaction holds its partition until the server ends the
// idle transaction (store.IdleInTxTimeout; a second here): the claims of that partition then
// fire. Before the timeout they waited as long as the node stayed frozen, for ever if it never
// went on.
func TestQueueFiresAPartitionOnceAFrozenHoldersTransactionIsEnded(t *testing.T) {
	e := setupRealTime(t, 8)
	f := e.f
	due := time.Now().Truncate(time.Millisecond)
	j := key("frozen")
	e.f.Job(t, j, false)
	e.f.Trigger(t, j, j, testenv.Repeating(time.Minute), due)
	c := e.claim(t, j, j, due, true, false)
	c.Partition = f.Locks.PartitionOf(j.Group, j.Name)
	f.FreezeInPartition(t, c.Partition, time.Second)

	q := e.runQueue(t, []store.Claim{c}...)
	if n := q.TestSignals.Fired.Wait(t); n != 1 {
		t.Fatalf("fired %d, want the claim of partition %d once its frozen holder's transaction was ended", n, c.Partition)
	}
	if got := f.State(t, j); got != store.StateWaiting {
		t.Fatalf("trigger is %s after it fired, want %s", got, store.StateWaiting)
	}
}

// Fencing: a claim fires only while the node that made it is a member under the claim's epoch.
// A node declared failed (its epoch replaced) cannot fire what it claimed before.
func TestFireRefusesClaimsOfAFencedEpoch(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	e.f.Exec(t, `insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms, epoch)
		values ($1, 'n1', now(), 1000, 7)`, e.f.Namespace())
	c := store.Claim{FireID: uuid.Must(uuid.NewV7()), TriggerGroup: "g", TriggerName: "t", JobGroup: "g", JobName: "j",
		SchedTime: t0, Epoch: 7, Ahead: true}
	e.f.Exec(t, `update triggers set state = 'ACQUIRED' where sched_name = $1`, e.f.Namespace())
	if err := e.outbox.InTx(t.Context(), func(tx *outbox.Tx) error {
		return store.InsertFired(t.Context(), tx, e.f.Namespace(), "n1", store.FiredAcquired, t0, []store.Claim{c})
	}); err != nil {
		t.Fatal(err)
	}
	e.f.Exec(t, `update scheduler_state set epoch = 8 where sched_name = $1`, e.f.Namespace()) // declared failed, rejoined
	if n := e.fireUnlocked(t, c); n != 0 {
		t.Fatalf("a claim of a fenced epoch fired (%d)", n)
	}
	member := &store.Member{}
	member.Set(7)
	err := e.outbox.InTx(t.Context(), func(tx *outbox.Tx) error {
		return store.CheckMember(t.Context(), tx, e.f.Namespace(), "n1", member)
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("CheckMember with a replaced epoch: %v, want ErrFenced", err)
	}
}

// Taking partitions and reading the node's membership in one round trip: the partitions are
// taken or found held as one statement after the other would, and a replaced epoch fences.
func TestPartitionsAsMember(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	ob := outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil)
	f.Exec(t, `insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms, epoch)
		values ($1, 'n1', now(), 1000, 8)`, f.Namespace())
	member := &store.Member{}
	member.Set(7)
	locks := f.Locks
	err := ob.InTx(t.Context(), func(tx *outbox.Tx) error {
		_, err := locks.PartitionsAsMember(t.Context(), tx, []int{1, 0}, "n1", member)
		return err
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("PartitionsAsMember with a replaced epoch: %v, want ErrFenced", err)
	}
	err = ob.InTx(t.Context(), func(tx *outbox.Tx) error {
		_, err := locks.TryPartitionAsMember(t.Context(), tx, 3, "n1", member)
		return err
	})
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("TryPartitionAsMember with a replaced epoch: %v, want ErrFenced", err)
	}
	member.Set(8)
	err = ob.InTx(t.Context(), func(tx *outbox.Tx) error {
		if _, err := locks.PartitionsAsMember(t.Context(), tx, []int{1, 0, 1}, "n1", member); err != nil {
			return err
		}
		// Another transaction finds partition 1 held, and partition 2 free.
		return ob.InTx(t.Context(), func(other *outbox.Tx) error {
			for p, want := range map[int]bool{1: false, 2: true} {
				got, err := locks.TryPartitionAsMember(t.Context(), other, p, "n1", member)
				if err != nil || got != want {
					t.Errorf("TryPartitionAsMember(%d) = %v, %v; want %v", p, got, err, want)
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatalf("PartitionsAsMember with the current epoch: %v", err)
	}
}

// A fire transaction can commit while its node does not hear so (the database restarted during
// the commit); the node then fires the claim again. That second attempt must change nothing:
// the execution's fired row stays, so its completion is recorded, and no drop is logged.
func TestFireAgainAfterALostCommitAnswerChangesNothing(t *testing.T) {
	e := setup(t)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	c := e.claim(t, key("t"), key("j"), t0, true, false)
	if n := e.fire(t, c); n != 1 {
		t.Fatalf("first attempt fired %d", n)
	}
	if n := e.fire(t, c); n != 0 {
		t.Fatalf("the retried attempt fired %d, want 0", n)
	}
	if n := e.f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and entry_id = $2 and state = 'EXECUTING'`, c.FireID); n != 1 {
		t.Fatal("the retried attempt removed the execution's fired row: its completion would be ignored")
	}
	if types := e.f.EventTypes(t); len(types) != 1 || types[0] != events.TypeJobFired {
		t.Fatalf("logged %v, want only the first attempt's JobFired", types)
	}
}
