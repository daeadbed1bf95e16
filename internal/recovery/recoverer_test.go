package recovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/recovery"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func key(name string) events.Key { return events.Key{Group: "g", Name: name} }

func newRecoverer(f *testenv.Fixture, instance string, now func() time.Time) *recovery.Recoverer {
	return recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: instance, Locks: f.Locks, Now: now},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
}

// claimedBy leaves trigger k ACQUIRED by node, with its fired row.
func claimedBy(t *testing.T, f *testenv.Fixture, k events.Key, node string, at time.Time) {
	t.Helper()
	f.Trigger(t, k, key("j"), testenv.Repeating(time.Minute), at)
	f.Exec(t, `update triggers set state = 'ACQUIRED' where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
		f.Namespace(), k.Group, k.Name)
	f.Exec(t, `insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
		fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
		values ($1, $2, $3, $4, 'g', 'j', $5, $6, $6, 'ACQUIRED', false, false, 5)`,
		f.Namespace(), uuid.Must(uuid.NewV7()), k.Group, k.Name, node, at)
}

// A node whose check-in is older than the database clock allows is failed: its unfired claims
// go back to WAITING with an event, and it leaves the membership table. A new node does not
// report itself failed.
func TestRecoversFailedNode(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	f.Job(t, key("j"), false)
	at := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	claimedBy(t, f, key("dead-claim"), "dead", at)
	claimedBy(t, f, key("live-claim"), "live", at)
	f.Exec(t, `insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms) values
		($1, 'dead', now() - interval '1 minute', 5000), ($1, 'live', now(), 5000)`, f.Namespace())

	res, err := newRecoverer(f, "n1", time.Now).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FailedNodes) != 1 || res.FailedNodes[0] != "dead" || res.Released != 1 {
		t.Fatalf("pass %+v, want node dead failed and 1 trigger released", res)
	}
	if got := f.State(t, key("dead-claim")); got != store.StateWaiting {
		t.Fatalf("the dead node's claim is %s, want WAITING", got)
	}
	if got := f.State(t, key("live-claim")); got != store.StateAcquired {
		t.Fatalf("the live node's claim is %s, want ACQUIRED", got)
	}
	if n := f.Count(t, `select count(*) from scheduler_state where sched_name = $1 and instance_id in ('dead', 'n1')`); n != 1 {
		t.Fatalf("membership has %d of {dead, n1}, want n1 only", n)
	}
	if types := f.EventTypes(t); len(types) != 1 || types[0] != events.TypeTriggerReleased {
		t.Fatalf("logged %v, want one TriggerReleased", types)
	}
}

// A node starting with the instance id of an earlier run gives back that run's claims on its
// first pass, without calling itself failed.
func TestFirstPassGivesBackEarlierRunsClaims(t *testing.T) {
	f := testenv.NewFixture(t, 1)
	f.Job(t, key("j"), false)
	claimedBy(t, f, key("old"), "n1", time.Now().Add(time.Minute).Truncate(time.Millisecond))
	res, err := newRecoverer(f, "n1", time.Now).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FailedNodes) != 0 || res.Released != 1 {
		t.Fatalf("first pass %+v, want no failed node and 1 trigger released", res)
	}
	if got := f.State(t, key("old")); got != store.StateWaiting {
		t.Fatalf("the earlier run's claim is %s, want WAITING", got)
	}
}

// A trigger later than the misfire threshold gets its misfire instruction applied and a
// TriggerMisfired event. The smart policy of a simple trigger repeating forever is Quartz's
// "reschedule next with remaining count": the next time on its grid after now.
func TestMisfireScan(t *testing.T) {
	f := testenv.NewFixture(t, 1)
	f.Job(t, key("j"), false)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Trigger(t, key("late"), key("j"), testenv.Repeating(time.Hour), now.Add(-10*time.Minute))
	f.Trigger(t, key("on-time"), key("j"), testenv.Repeating(time.Hour), now.Add(-time.Second))
	r := newRecoverer(f, "n1", func() time.Time { return now })
	m := metrictest.New(t)
	r.SetMeterProvider(m.Provider)
	res, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Misfired != 1 {
		t.Fatalf("pass %+v, want 1 misfire", res)
	}
	var next time.Time
	if err := f.Pool.QueryRow(t.Context(), `select next_fire_time from triggers where sched_name = $1 and trigger_name = 'late'`,
		f.Namespace()).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if want := now.Add(50 * time.Minute); !next.Equal(want) {
		t.Fatalf("misfired trigger's next fire %v, want %v", next, want)
	}
	if types := f.EventTypes(t); len(types) != 1 || types[0] != events.TypeTriggerMisfired {
		t.Fatalf("logged %v, want one TriggerMisfired", types)
	}
	if got := m.Sum(t, "agate.scheduler.misfires", metrictest.Attrs{"instruction": "smart_policy"}); got != 1 {
		t.Fatalf("misfires counted by instruction smart_policy: %d, want 1", got)
	}
}

// Leave gives this node's claims back and removes it from the membership table.
func TestLeave(t *testing.T) {
	f := testenv.NewFixture(t, 2)
	f.Job(t, key("j"), false)
	r := newRecoverer(f, "n1", time.Now)
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	claimedBy(t, f, key("mine"), "n1", time.Now().Add(time.Minute).Truncate(time.Millisecond))
	if err := r.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := f.State(t, key("mine")); got != store.StateWaiting {
		t.Fatalf("the leaving node's claim is %s, want WAITING", got)
	}
	if n := f.Count(t, `select count(*) from scheduler_state where sched_name = $1`); n != 0 {
		t.Fatalf("%d membership rows after leave, want 0", n)
	}
}

// The scan handles every misfired trigger in one pass, more than a batch of them and in every
// partition, and puts one it cannot compute in ERROR instead of selecting it again and again.
func TestMisfireScanHandlesAllAndErrorsTheUncomputable(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const n = 1200 // more than two batches
	for i := range n {
		j := events.Key{Group: "g", Name: fmt.Sprintf("j%04d", i)}
		f.Job(t, j, false)
		f.Trigger(t, j, j, testenv.Repeating(time.Hour), now.Add(-10*time.Minute))
	}
	f.Exec(t, `update triggers set schedule = '{"simple": 1}' where sched_name = $1 and trigger_name = 'j0007'`, f.Namespace())
	res, err := newRecoverer(f, "n1", func() time.Time { return now }).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Misfired != n {
		t.Fatalf("one pass handled %d misfired triggers, want %d", res.Misfired, n)
	}
	if late := f.Count(t, `select count(*) from triggers where sched_name = $1 and state = 'WAITING' and next_fire_time < $2`, now); late != 0 {
		t.Fatalf("%d triggers still misfired after the pass", late)
	}
	if got := f.State(t, events.Key{Group: "g", Name: "j0007"}); got != store.StateError {
		t.Fatalf("the uncomputable trigger is %s, want ERROR", got)
	}
}

// A node whose membership row is gone (another node's recovery declared it failed) finds out at
// its next check-in: it is out at once, then rejoins under a new epoch and gives back the claims
// of its old one.
func TestFencedNodeRejoinsUnderNewEpoch(t *testing.T) {
	f := testenv.NewFixture(t, 2)
	f.Job(t, key("j"), false)
	member := &store.Member{}
	r := recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Member: member},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := member.Epoch()
	if first == 0 {
		t.Fatal("the node has no epoch after joining")
	}
	claimedBy(t, f, key("old"), "n1", time.Now().Add(time.Minute).Truncate(time.Millisecond))
	f.Exec(t, `delete from scheduler_state where sched_name = $1 and instance_id = 'n1'`, f.Namespace())
	res, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Fenced || member.Epoch() == 0 || member.Epoch() == first {
		t.Fatalf("pass %+v with epoch %d (was %d): want fenced, then a member under a new epoch", res, member.Epoch(), first)
	}
	if got := f.State(t, key("old")); got != store.StateWaiting {
		t.Fatalf("the old epoch's claim is %s, want WAITING", got)
	}
}

// A transaction that claims or fires holds its node's membership row FOR KEY SHARE: the node's
// check-in goes through at once (under FOR SHARE it waited behind every such transaction), while
// the cluster declaring the node failed, and a new run of its instance id joining, wait for it.
func TestMembershipHeldByATransactionLetsCheckInsThrough(t *testing.T) {
	f := testenv.NewFixture(t, 2)
	// A lock wait fails after 200 ms on this pool instead of waiting for the transaction below.
	cfg := f.Pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "200"
	impatient, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer impatient.Close()
	run := func(member *store.Member) *recovery.Recoverer {
		return recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Member: member},
			impatient, outbox.New(outbox.Config{Namespace: f.Namespace()}, impatient, nil))
	}
	member := &store.Member{}
	r := run(member)
	if _, err := r.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	tx, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := store.CheckMember(t.Context(), tx, f.Namespace(), "n1", member); err != nil {
		t.Fatal(err)
	}

	if res, err := r.RunOnce(t.Context()); err != nil || res.Fenced {
		t.Fatalf("check-in while a fire transaction held the membership: %+v, %v; want it through", res, err)
	}
	if _, err := run(&store.Member{}).RunOnce(t.Context()); !isLockTimeout(err) {
		t.Fatalf("a new run of n1 joined while a transaction of the old run held its membership: %v", err)
	}
	if _, err := impatient.Exec(t.Context(), `delete from scheduler_state where sched_name = $1 and instance_id = 'n1'`,
		f.Namespace()); !isLockTimeout(err) {
		t.Fatalf("n1 was declared failed while a transaction of its held its membership: %v", err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// The healing scan repairs triggers stuck where nothing would move them, with an event each,
// and leaves alone those with an execution or a live claim.
func TestHealRepairsStuckTriggers(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	now := time.Now().Truncate(time.Millisecond)
	set := func(k events.Key, state string) {
		f.Exec(t, `update triggers set state = $4 where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
			f.Namespace(), k.Group, k.Name, state)
	}
	fired := func(k, j events.Key, node, state string) {
		f.Exec(t, `insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name,
			instance_id, fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
			values ($1, $2, $3, $4, $5, $6, $7, now(), now(), $8, true, false, 5)`,
			f.Namespace(), uuid.Must(uuid.NewV7()), k.Group, k.Name, j.Group, j.Name, node, state)
	}
	for _, j := range []string{"stuck-nc", "busy-nc", "plain", "once"} {
		f.Job(t, key(j), j != "plain" && j != "once")
	}
	f.Trigger(t, key("blocked"), key("stuck-nc"), testenv.Repeating(time.Minute), now.Add(time.Hour))
	set(key("blocked"), store.StateBlocked)
	f.Trigger(t, key("busy"), key("busy-nc"), testenv.Repeating(time.Minute), now.Add(time.Hour))
	set(key("busy"), store.StateBlocked)
	fired(key("busy"), key("busy-nc"), "n1", "EXECUTING")
	f.Trigger(t, key("orphan-claim"), key("plain"), testenv.Repeating(time.Minute), now.Add(time.Hour))
	set(key("orphan-claim"), store.StateAcquired)
	fired(key("orphan-claim"), key("plain"), "gone-node", "ACQUIRED")
	f.Trigger(t, key("done"), key("once"), testenv.OneShot(), now.Add(time.Hour))
	set(key("done"), store.StateComplete)

	r := recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	res, err := r.RunOnce(t.Context()) // the first pass heals
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Repairs) != 3 {
		t.Fatalf("repaired %+v, want the blocked, the orphan claim and the complete trigger", res.Repairs)
	}
	for k, want := range map[string]string{"blocked": store.StateWaiting, "busy": store.StateBlocked,
		"orphan-claim": store.StateWaiting, "done": ""} {
		if got := f.State(t, key(k)); got != want {
			t.Errorf("trigger %s is %q, want %q", k, got, want)
		}
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'once'`); n != 0 {
		t.Error("the finished one-shot's job was not deleted")
	}
	if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and instance_id = 'gone-node'`); n != 0 {
		t.Error("the claim of a node that left is still there")
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeTriggerRepaired); n != 3 {
		t.Errorf("%d TriggerRepaired events, want 3", n)
	}
}

// TestHealUnblocksAPausedTriggerToPaused: a PAUSED_BLOCKED trigger whose job has nothing in
// flight goes back to PAUSED, and its TriggerRepaired says so (replay applies "to").
func TestHealUnblocksAPausedTriggerToPaused(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	f.Job(t, key("nc"), true)
	f.Trigger(t, key("paused"), key("nc"), testenv.Repeating(time.Minute), time.Now().Add(time.Hour))
	f.Exec(t, `update triggers set state = 'PAUSED_BLOCKED' where sched_name = $1`, f.Namespace())

	r := recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	res, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := recovery.Repair{Trigger: key("paused"), From: store.StatePausedBlocked, To: store.StatePaused,
		Reason: "blocked with no execution of its job in flight"}
	if len(res.Repairs) != 1 || res.Repairs[0] != want {
		t.Fatalf("repaired %+v, want %+v", res.Repairs, want)
	}
	if got := f.State(t, key("paused")); got != store.StatePaused {
		t.Errorf("trigger is %q, want PAUSED", got)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2
		and data->>'from' = 'PAUSED_BLOCKED' and data->>'to' = 'PAUSED'`, events.TypeTriggerRepaired); n != 1 {
		t.Errorf("%d TriggerRepaired events from PAUSED_BLOCKED to PAUSED, want 1", n)
	}
}

// A node that published events vouches for them within VouchEvery, not only at its check-in
// interval: the sweep publishes again what nobody vouched for after its delay (3 s), shorter
// than the default check-in interval (5 s). Here the interval is an hour: the first heartbeat
// check-in comes because the node's first pass moved what it vouches for.
func TestVouchesBeforeTheCheckinInterval(t *testing.T) {
	f := testenv.NewFixture(t, 1)
	r := recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, CheckinInterval: time.Hour},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	r.TestSignals.Pass.Init()
	r.TestSignals.Vouched.Init()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r.TestSignals.Pass.Wait(t)
	below := r.TestSignals.Vouched.Wait(t)
	if below == 0 {
		t.Fatal("the heartbeat vouched for nothing")
	}
	if n := f.Count(t, `select count(*) from scheduler_state where sched_name = $1 and instance_id = 'n1'
		and published_below = $2::text::xid8`, fmt.Sprint(below)); n != 1 {
		t.Fatalf("scheduler_state does not hold published_below %d", below)
	}
}

// A failed node stopped in the middle of a transaction holds its lock partition until it goes
// on. Recovering it does not wait for that partition holding the others (every node's fires
// in them would wait too): the pass gives up at once, and releases the node's claims once the
// partition is free.
func TestRecoveryGivesUpOnAPartitionAFailedNodeHolds(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	f.Job(t, key("j"), false)
	r := newRecoverer(f, "n1", time.Now)
	if _, err := r.RunOnce(t.Context()); err != nil { // joins: its first pass takes every partition
		t.Fatal(err)
	}
	claimedBy(t, f, key("dead-claim"), "dead", time.Now().Add(time.Minute).Truncate(time.Millisecond))
	f.Exec(t, `insert into scheduler_state (sched_name, instance_id, last_checkin_time, checkin_interval_ms) values
		($1, 'dead', now() - interval '1 minute', 5000)`, f.Namespace())
	held := f.Locks.Count() - 1 // the last partition: the pass holds all the others while it waits
	release := f.HoldPartition(t, held)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := r.RunOnce(ctx); !errors.Is(err, store.ErrPartitionsHeld) {
		t.Fatalf("pass while partition %d is held: %v, want ErrPartitionsHeld", held, err)
	}
	if got := f.State(t, key("dead-claim")); got != store.StateAcquired {
		t.Fatalf("the failed node's claim is %s while its partition is held, want ACQUIRED", got)
	}
	release()
	res, err := r.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.FailedNodes) != 1 || res.Released != 1 {
		t.Fatalf("pass once the partition is free: %+v, want node dead failed and its claim released", res)
	}
}

// A node joining while another holds a lock partition (stopped in the middle of a transaction)
// waits for it, rather than failing to start.
func TestJoinWaitsForAHeldPartition(t *testing.T) {
	f := testenv.NewFixture(t, 8)
	release := f.HoldPartition(t, 3)
	retrying := &logSignal{want: "joining the cluster failed; retrying", c: make(chan struct{})}
	r := recovery.New(recovery.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks,
		Logger: slog.New(slog.NewTextHandler(retrying, nil))},
		f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil))
	done := make(chan error, 1)
	go func() { done <- r.Join(t.Context()) }()
	select {
	case err := <-done:
		t.Fatalf("Join ended while a partition was held: %v", err)
	case <-retrying.c:
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("Join once the partition was free: %v", err)
	}
}

// logSignal closes c when a log line containing want is written.
type logSignal struct {
	want string
	c    chan struct{}
	once sync.Once
}

func (l *logSignal) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(l.want)) {
		l.once.Do(func() { close(l.c) })
	}
	return len(p), nil
}
