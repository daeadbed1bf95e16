package complete_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/wake"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func key(name string) events.Key { return events.Key{Group: "g", Name: name} }

// newConsumer is node n1's consumer of the fixture's namespace, without NATS: for Apply.
func newConsumer(f *testenv.Fixture) *complete.Consumer {
	return complete.New(complete.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Wake: wake.New()},
		outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil), nil)
}

// holdPartitions holds every lock partition in a transaction until release (or the test's end).
func holdPartitions(t *testing.T, f *testenv.Fixture) (release func()) {
	t.Helper()
	holder, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	if err := f.Locks.All(t.Context(), holder); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := holder.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// executing leaves trigger k of job j in state after a fire, with the fire's EXECUTING row; a
// fire that leaves its trigger COMPLETE deletes it, as internal/fire does.
func executing(t *testing.T, f *testenv.Fixture, k, j events.Key, state string, nonconcurrent bool) uuid.UUID {
	t.Helper()
	f.Trigger(t, k, j, testenv.Repeating(time.Minute), t0)
	f.Exec(t, `update triggers set state = $4 where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
		f.Namespace(), k.Group, k.Name, state)
	if state == store.StateComplete {
		f.Exec(t, `delete from triggers where sched_name = $1 and trigger_group = $2 and trigger_name = $3`,
			f.Namespace(), k.Group, k.Name)
	}
	id := uuid.Must(uuid.NewV7())
	f.Exec(t, `insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
		fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
		values ($1, $2, $3, $4, $5, $6, 'n1', $7, $7, 'EXECUTING', $8, false, 5)`,
		f.Namespace(), id, k.Group, k.Name, j.Group, j.Name, t0, nonconcurrent)
	return id
}

func outcome(t *testing.T, typ string, id uuid.UUID, j events.Key, final bool) complete.Outcome {
	t.Helper()
	res := events.JobResult{FireID: id, Job: events.JobRef{Group: j.Group, Name: j.Name, Type: "noop"}}
	if typ == events.TypeJobFailed {
		res.Error = &events.JobError{Message: "boom", Final: final}
	}
	ev, err := events.New(typ, "agate/test/w1", events.AggregateJob, j.String(), "", t0, res)
	if err != nil {
		t.Fatal(err)
	}
	return complete.Outcome{Type: typ, Event: ev, Result: res}
}

// Ending outcomes delete the fired rows, release what a non-concurrent job blocked, delete a
// finished one-shot and its job, and are recorded once; a retryable failure changes nothing but
// the log.
func TestApply(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	w := wake.New()
	c := complete.New(complete.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Wake: w},
		outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil), nil)
	f.Job(t, key("nc"), true)
	ncFire := executing(t, f, key("nc-a"), key("nc"), store.StateBlocked, true)
	f.Trigger(t, key("nc-b"), key("nc"), testenv.Repeating(time.Minute), t0)
	f.Exec(t, `update triggers set state = 'PAUSED_BLOCKED' where sched_name = $1 and trigger_name = 'nc-b'`, f.Namespace())
	f.Job(t, key("once"), false)
	onceFire := executing(t, f, key("once-t"), key("once"), store.StateComplete, false)
	f.Job(t, key("flaky"), false)
	flakyFire := executing(t, f, key("flaky-t"), key("flaky"), store.StateWaiting, false)
	// A job whose one trigger repeats, and one with a trigger left when the other completes: both stay.
	f.Job(t, key("rep"), false)
	repFire := executing(t, f, key("rep-t"), key("rep"), store.StateWaiting, false)
	f.Job(t, key("pair"), false)
	pairFire := executing(t, f, key("pair-a"), key("pair"), store.StateComplete, false)
	f.Trigger(t, key("pair-b"), key("pair"), testenv.Repeating(time.Minute), t0)

	outs := []complete.Outcome{
		outcome(t, events.TypeJobCompleted, ncFire, key("nc"), false),
		outcome(t, events.TypeJobCompleted, onceFire, key("once"), false),
		outcome(t, events.TypeJobFailed, flakyFire, key("flaky"), false),
		outcome(t, events.TypeJobCompleted, repFire, key("rep"), false),
		outcome(t, events.TypeJobCompleted, pairFire, key("pair"), false),
	}
	got, err := c.Apply(t.Context(), outs)
	if err != nil {
		t.Fatal(err)
	}
	if want := (complete.Applied{Ended: 4, Released: 2}); got != want {
		t.Fatalf("applied %+v, want %+v", got, want)
	}
	select {
	case <-w.C():
	default:
		t.Fatal("releasing triggers did not wake the acquire loop")
	}
	for k, want := range map[string]string{"nc-a": store.StateWaiting, "nc-b": store.StatePaused, "once-t": "", "flaky-t": store.StateWaiting,
		"rep-t": store.StateWaiting, "pair-a": "", "pair-b": store.StateWaiting} {
		if got := f.State(t, key(k)); got != want {
			t.Errorf("trigger %s is %q, want %q", k, got, want)
		}
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'once'`); n != 0 {
		t.Error("the finished one-shot's non-durable job was not deleted")
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name in ('rep', 'pair')`); n != 2 {
		t.Errorf("%d of the jobs with a trigger left are there, want 2", n)
	}
	if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 1 {
		t.Errorf("%d fired rows left, want only the retrying one", n)
	}
	// The same outcomes again (a redelivery), the retryable failure twice in the batch: nothing
	// changes and nothing is logged twice.
	before := len(f.EventTypes(t))
	got, err = c.Apply(t.Context(), append(outs[:3:3], outs[2]))
	if err != nil {
		t.Fatal(err)
	}
	if want := (complete.Applied{Ignored: 2}); got != want {
		t.Fatalf("redelivered outcomes applied %+v, want %+v", got, want)
	}
	if after := len(f.EventTypes(t)); after != before {
		t.Fatalf("redelivered outcomes logged %d more events", after-before)
	}
}

// Two ending outcomes of one execution in one batch (its first run's, late, and a re-run's
// after JetStream redelivered the fire): the first ends it and is logged, the second is not.
func TestApplyEndsAnExecutionOnceInABatch(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	c := newConsumer(f)
	f.Job(t, key("j"), false)
	fire := executing(t, f, key("t"), key("j"), store.StateWaiting, false)
	first, rerun := outcome(t, events.TypeJobCompleted, fire, key("j"), false), outcome(t, events.TypeJobCompleted, fire, key("j"), false)
	got, err := c.Apply(t.Context(), []complete.Outcome{first, rerun})
	if err != nil {
		t.Fatal(err)
	}
	if want := (complete.Applied{Ended: 1, Ignored: 1}); got != want {
		t.Fatalf("applied %+v, want %+v", got, want)
	}
	var ids []uuid.UUID
	rows, err := f.Pool.Query(t.Context(), `select id from events where sched_name = $1 and type = $2`, f.Namespace(), events.TypeJobCompleted)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 || ids[0] != first.Event.ID {
		t.Fatalf("logged JobCompleted %v, want only the first outcome %v", ids, first.Event.ID)
	}
}

// An execution of a repeating trigger of a concurrent job changes nothing but its fired row when
// it ends, so its outcome is recorded while another transaction holds every lock partition; a
// one-shot's, which deletes its job, waits for the partitions and is recorded once they are
// free.
func TestApplyEndsARepeatingTriggersExecutionWithoutThePartitionLocks(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	c := newConsumer(f)
	f.Job(t, key("rep"), false)
	repFire := executing(t, f, key("rep-t"), key("rep"), store.StateWaiting, false)
	f.Job(t, key("once"), false)
	onceFire := executing(t, f, key("once-t"), key("once"), store.StateComplete, false)

	release := holdPartitions(t, f)
	// Were it to wait for a partition, it would wait until the deadline.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := c.Apply(ctx, []complete.Outcome{outcome(t, events.TypeJobCompleted, repFire, key("rep"), false)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (complete.Applied{Ended: 1}); got != want {
		t.Fatalf("applied %+v while the partitions were held, want %+v", got, want)
	}
	if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and entry_id = $2`, repFire); n != 0 {
		t.Fatal("the repeating trigger's execution did not end")
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeJobCompleted); n != 1 {
		t.Fatalf("%d JobCompleted logged, want 1", n)
	}

	// The one-shot's outcome waits for the partitions: seen waiting on a lock, it is recorded
	// once the holder lets go.
	done := make(chan error, 1)
	go func() {
		_, err := c.Apply(t.Context(), []complete.Outcome{outcome(t, events.TypeJobCompleted, onceFire, key("once"), false)})
		done <- err
	}()
	awaitLockWait(t, f, done, "the one-shot's outcome")
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'once'`); n != 0 {
		t.Fatal("the one-shot's non-durable job is there after its execution ended, want it deleted")
	}
}

// A trigger's last fire deletes it, so its name may be taken by another job's trigger while the
// execution runs: that execution's end is not a repeating trigger's, and deletes its own job.
func TestApplyEndsAnExecutionWhoseTriggerNameWasTakenByAnotherJob(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	c := newConsumer(f)
	f.Job(t, key("old"), false)
	fire := executing(t, f, key("reused"), key("old"), store.StateComplete, false)
	f.Job(t, key("new"), false)
	f.Trigger(t, key("reused"), key("new"), testenv.Repeating(time.Minute), t0)
	// No triggerState echoed: the end is first looked for as a repeating trigger's.
	if _, err := c.Apply(t.Context(), []complete.Outcome{outcome(t, events.TypeJobCompleted, fire, key("old"), false)}); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'old'`); n != 0 {
		t.Error("the ended execution's job is there: its end was taken for a repeating trigger's")
	}
	if n := f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'new'`); n != 1 {
		t.Error("the job that took the trigger's name was deleted")
	}
	if s := f.State(t, key("reused")); s != store.StateWaiting {
		t.Errorf("the new trigger is %q, want WAITING", s)
	}
}

// A non-durable job whose last triggers fired (and were deleted by their fires) stays while any
// of their executions is in flight, and goes when the last one ends (unschedule_trigger
// meanwhile: internal/node's TestAJobOutlivesItsLastTriggerUntilItsExecutionEnds).
func TestApplyDeletesAJobWhenItsLastExecutionEnds(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	c := newConsumer(f)
	f.Job(t, key("twin"), false)
	first := executing(t, f, key("twin-a"), key("twin"), store.StateComplete, false)
	second := executing(t, f, key("twin-b"), key("twin"), store.StateComplete, false)
	jobs := func() int {
		return f.Count(t, `select count(*) from job_details where sched_name = $1 and job_name = 'twin'`)
	}
	if _, err := c.Apply(t.Context(), []complete.Outcome{outcome(t, events.TypeJobCompleted, first, key("twin"), false)}); err != nil {
		t.Fatal(err)
	}
	if jobs() != 1 {
		t.Fatal("the job was deleted while an execution of it was still in flight")
	}
	if _, err := c.Apply(t.Context(), []complete.Outcome{outcome(t, events.TypeJobFailed, second, key("twin"), true)}); err != nil {
		t.Fatal(err)
	}
	if jobs() != 0 {
		t.Fatal("the job is there after its last execution ended")
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeJobDeleted); n != 1 {
		t.Fatalf("%d JobDeleted logged, want 1", n)
	}
}

// awaitLockWait returns once a transaction of the fixture's database waits for a lock partition,
// and fails the test if done (the apply of what) says it finished first.
func awaitLockWait(t *testing.T, f *testenv.Fixture, done <-chan error, what string) {
	t.Helper()
	for waiting := 0; waiting == 0; {
		select {
		case err := <-done:
			t.Fatalf("%s was applied while every partition was held (error %v)", what, err)
		default:
		}
		waiting = f.Count(t, `select count(*) from pg_stat_activity where datname = current_database() and $1 <> ''
			and wait_event_type = 'Lock' and query like '%from locks%'`)
	}
}

// An outcome whose fire left its trigger COMPLETE or BLOCKED (JobFired.triggerState, echoed by
// the worker) goes straight to the partition locks: it is not looked for as a repeating
// trigger's. The state is a hint, never trusted for the end itself: here it is wrong (the
// trigger repeats), the outcome waits for the partitions like a one-shot's, and then ends the
// execution as a repeating trigger's, leaving the trigger and its job.
func TestApplyTakesTheLocksForTheEndOfALastFire(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	c := newConsumer(f)
	f.Job(t, key("rep"), false)
	fire := executing(t, f, key("rep-t"), key("rep"), store.StateWaiting, false)
	o := outcome(t, events.TypeJobCompleted, fire, key("rep"), false)
	o.Result.TriggerState = store.StateComplete

	release := holdPartitions(t, f)
	done := make(chan error, 1)
	go func() {
		_, err := c.Apply(t.Context(), []complete.Outcome{o})
		done <- err
	}()
	awaitLockWait(t, f, done, "the outcome of a fire said to be its trigger's last")
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and entry_id = $2`, fire); n != 0 {
		t.Fatal("the execution did not end")
	}
	if s := f.State(t, key("rep-t")); s != store.StateWaiting {
		t.Fatalf("the repeating trigger is %q after its execution ended, want %s", s, store.StateWaiting)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeJobCompleted); n != 1 {
		t.Fatalf("%d JobCompleted logged, want 1", n)
	}
}

// twoPartitions is a namespace with two one-shots' last fires executing, of jobs in two lock
// partitions, the lower of which (held) another transaction holds until release; and its
// JetStream streams.
type twoPartitions struct {
	f          *testenv.Fixture
	js         jetstream.JetStream
	fires      map[int]uuid.UUID
	jobs       map[int]events.Key
	held, free int
	release    func()
}

func newTwoPartitions(t *testing.T) *twoPartitions {
	t.Helper()
	tp := &twoPartitions{f: testenv.NewFixture(t, 8), fires: map[int]uuid.UUID{}, jobs: map[int]events.Key{}}
	_, tp.js = testenv.JetStream(t, testenv.NATS(t))
	if err := events.EnsureStreams(t.Context(), tp.js, tp.f.Namespace()); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(tp.fires) < 2; i++ {
		j := key(fmt.Sprint("j", i))
		p := tp.f.Locks.PartitionOf(j.Group, j.Name)
		if _, ok := tp.fires[p]; ok {
			continue
		}
		tp.f.Job(t, j, false)
		tp.fires[p], tp.jobs[p] = executing(t, tp.f, key(fmt.Sprint("t", i)), j, store.StateComplete, false), j
	}
	ps := slices.Sorted(maps.Keys(tp.fires))
	tp.held, tp.free = ps[0], ps[1]
	tp.release = tp.f.HoldPartition(t, tp.held)
	return tp
}

// completed is the JobCompleted a worker publishes for the fire of partition p.
func (tp *twoPartitions) completed(t *testing.T, p int) events.Event {
	t.Helper()
	return completed(t, tp.f.Namespace(), tp.jobs[p], tp.fires[p])
}

// executing reports whether partition p's execution has not ended.
func (tp *twoPartitions) executing(t *testing.T, p int) bool {
	t.Helper()
	return tp.f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and entry_id = $2`, tp.fires[p]) == 1
}

// completed is the JobCompleted a worker publishes for fire id of job j, a one-shot's last fire.
func completed(t *testing.T, ns string, j events.Key, id uuid.UUID) events.Event {
	t.Helper()
	res := events.JobResult{FireID: id, Job: events.JobRef{Group: j.Group, Name: j.Name, Type: "noop"},
		TriggerState: store.StateComplete}
	ev, err := events.New(events.TypeJobCompleted, "agate/test/w1", events.AggregateJob, j.String(),
		events.Subjects(ns).Done("noop"), time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// startConsumer runs a consumer of f's namespace until the returned stop.
func startConsumer(t *testing.T, f *testenv.Fixture, js jetstream.JetStream) (c *complete.Consumer, stop func()) {
	t.Helper()
	c = complete.New(complete.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Wake: wake.New()},
		outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil), js)
	c.TestSignals.Applied.Init()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

// A partition that another transaction holds (a node stopped in the middle of one) does not
// hold up the completions of the other partitions: they are recorded, and the held partition's
// once it is free.
func TestConsumerRecordsOtherPartitionsWhileOneIsHeld(t *testing.T) {
	tp := newTwoPartitions(t)
	held, free := tp.held, tp.free
	for _, p := range []int{held, free} {
		msg, err := events.Message(tp.completed(t, p))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tp.js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := startConsumer(t, tp.f, tp.js)
	if got := c.TestSignals.Applied.Wait(t); got.Ended != 1 {
		t.Fatalf("applied %+v while partition %d was held, want the end of partition %d's execution", got, held, free)
	}
	if tp.executing(t, free) || !tp.executing(t, held) {
		t.Fatalf("partition %d held: execution of partition %d ended %v, of partition %d %v; want only the free one's",
			held, free, !tp.executing(t, free), held, !tp.executing(t, held))
	}
	tp.release()
	if got := c.TestSignals.Applied.Wait(t); got.Ended != 1 {
		t.Fatalf("applied %+v once partition %d was free, want the end of its execution", got, held)
	}
	if tp.executing(t, held) {
		t.Fatalf("the execution of partition %d did not end once it was free", held)
	}
}

// A worker's batch of outcomes (events.BatchMessage) is acknowledged once every outcome in it
// is recorded. Given back half recorded (its node stopped while one outcome waited for a
// partition), it is delivered again, and the outcome recorded before is not recorded twice.
// An element that is no outcome is dropped; the others are recorded all the same.
func TestConsumerAcksABatchOnceEveryOutcomeIsRecorded(t *testing.T) {
	tp := newTwoPartitions(t)
	f, js, ns, held, free := tp.f, tp.js, tp.f.Namespace(), tp.held, tp.free
	garbage := completed(t, ns, key("nobody"), uuid.Nil) // no fireId: not an outcome
	msg, err := events.BatchMessage(uuid.Must(uuid.NewV7()), []events.Event{tp.completed(t, free), garbage, tp.completed(t, held)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	unacked := func() int {
		cons, err := js.Consumer(t.Context(), events.StreamDone(ns), complete.DurableName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := cons.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending + int(info.NumPending)
	}

	c, stop := startConsumer(t, f, js)
	if got := c.TestSignals.Applied.Wait(t); got.Ended != 1 {
		t.Fatalf("applied %+v while partition %d was held, want the end of partition %d's execution", got, held, free)
	}
	if n := unacked(); n != 1 {
		t.Fatalf("%d messages unacknowledged with one outcome of the batch waiting, want the batch", n)
	}
	stop() // hands the waiting outcome back: the batch is redelivered

	tp.release()
	c, _ = startConsumer(t, f, js)
	if got := c.TestSignals.Applied.Wait(t); got != (complete.Applied{Ended: 1, Ignored: 1}) {
		t.Fatalf("applied %+v on redelivery, want partition %d's execution ended and the other outcome ignored", got, held)
	}
	if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1`); n != 0 {
		t.Errorf("%d executions left, want none", n)
	}
	if n := f.Count(t, `select count(*) from events where sched_name = $1 and type = $2`, events.TypeJobCompleted); n != 2 {
		t.Errorf("%d JobCompleted logged, want one for each fire", n)
	}
	// The acknowledgement went before the signal; the server counts it as it reads it.
	for deadline := time.Now().Add(10 * time.Second); unacked() != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the batch was not acknowledged once all its outcomes were recorded")
		}
	}
}
