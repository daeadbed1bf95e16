package acquire_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/wake"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// handoff records what acquire hands to step ③: claims to fire in its transaction, and claims to
// fire later.
type handoff struct {
	mu         sync.Mutex
	now, later []store.Claim
	fires      int // Fire calls with claims: transactions that fired
}

func (h *handoff) Fire(_ context.Context, _ *outbox.Tx, claims []store.Claim) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = append(h.now, claims...)
	if len(claims) > 0 {
		h.fires++
	}
	return len(claims), nil
}

func (h *handoff) Add(claims []store.Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.later = append(h.later, claims...)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T, partitions int) (*testenv.Fixture, *testenv.Clock, *handoff, *acquire.Acquirer) {
	t.Helper()
	return setupConfig(t, partitions, func(*acquire.Config) {})
}

// setupConfig is setup with the acquirer's configuration changed by change.
func setupConfig(t *testing.T, partitions int, change func(*acquire.Config)) (*testenv.Fixture, *testenv.Clock, *handoff, *acquire.Acquirer) {
	t.Helper()
	f := testenv.NewFixture(t, partitions)
	clock := testenv.NewClock(t0)
	h := &handoff{}
	ob := outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil)
	cfg := acquire.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks, Batch: 10,
		FireAhead: time.Second, Now: clock.Now}
	change(&cfg)
	return f, clock, h, acquire.New(cfg, f.Pool, ob, h, h)
}

func key(name string) events.Key { return events.Key{Group: "g", Name: name} }

// jobPerPartition adds a job in each of the n partitions and returns them by partition.
func jobPerPartition(t *testing.T, f *testenv.Fixture, n int) map[int]events.Key {
	t.Helper()
	jobs := map[int]events.Key{}
	for i := 0; len(jobs) < n; i++ {
		j := key(fmt.Sprint("j", i))
		if _, ok := jobs[f.Locks.PartitionOf(j.Group, j.Name)]; !ok {
			jobs[f.Locks.PartitionOf(j.Group, j.Name)] = j
			f.Job(t, j, false)
		}
	}
	return jobs
}

// A pass fires what is due in its own transaction, claims what is due within the fire-ahead
// window (trigger and fired row ACQUIRED) for the queue, and leaves the rest.
func TestRunOnceSplitsDueAndAhead(t *testing.T) {
	for _, partitions := range []int{1, 4} {
		f, _, h, a := setup(t, partitions)
		f.Job(t, key("j"), false)
		f.Trigger(t, key("due"), key("j"), testenv.Repeating(time.Minute), t0.Add(-time.Second))
		f.Trigger(t, key("ahead"), key("j"), testenv.Repeating(time.Minute), t0.Add(500*time.Millisecond))
		f.Trigger(t, key("later"), key("j"), testenv.Repeating(time.Minute), t0.Add(time.Hour))

		res, err := a.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if res.Claimed != 2 || res.FiredNow != 1 || res.NextWaiting.IsZero() {
			t.Fatalf("partitions %d: result %+v, want 2 claimed, 1 fired now", partitions, res)
		}
		if len(h.now) != 1 || h.now[0].Trigger() != key("due") || h.now[0].Ahead {
			t.Fatalf("fired in the acquire transaction: %+v, want the due trigger, not ahead", h.now)
		}
		if len(h.later) != 1 || h.later[0].Trigger() != key("ahead") || !h.later[0].Ahead || h.later[0].FireID.String() == "" {
			t.Fatalf("queued for later: %+v, want the ahead trigger", h.later)
		}
		if got := f.State(t, key("ahead")); got != store.StateAcquired {
			t.Fatalf("ahead trigger is %s, want ACQUIRED", got)
		}
		if got := f.State(t, key("later")); got != store.StateWaiting {
			t.Fatalf("later trigger is %s, want WAITING", got)
		}
		if n := f.Count(t, `select count(*) from fired_triggers where sched_name = $1 and state = 'ACQUIRED' and entry_id = $2`,
			h.later[0].FireID); n != 1 {
			t.Fatalf("%d ACQUIRED fired rows for the queued claim, want 1", n)
		}
		// A second pass finds nothing new: the ahead trigger is claimed.
		if res, err := a.RunOnce(t.Context()); err != nil || len(h.later) != 1 {
			t.Fatalf("second pass: %+v, %v; queued %d claims, want still 1", res, err, len(h.later))
		}
	}
}

// A partition whose fire-ahead window holds a full batch is in a heavy flow: its passes claim
// nothing ahead (no ACQUIRED row, nothing queued) and fire what is due, until the flow is light.
func TestRunOnceFiresAHeavyFlowWhenDue(t *testing.T) {
	f, clock, h, a := setup(t, 1) // Batch 10, FireAhead 1s
	f.Job(t, key("j"), false)
	for i := range 12 {
		f.Trigger(t, key(fmt.Sprint("t", i)), key("j"), testenv.Repeating(time.Hour), t0.Add(time.Duration(i+1)*80*time.Millisecond))
	}
	res, err := a.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Direct || res.Claimed != 0 || len(h.later) != 0 || len(h.now) != 0 {
		t.Fatalf("pass over a full window: %+v, queued %d, fired %d; want a heavy flow, nothing claimed", res, len(h.later), len(h.now))
	}
	if n := f.Count(t, `select count(*) from triggers where sched_name = $1 and state <> 'WAITING'`); n != 0 {
		t.Fatalf("%d triggers left WAITING's state, want none", n)
	}
	clock.Set(t0.Add(410 * time.Millisecond))
	if res, err = a.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !res.Direct || len(h.later) != 0 || len(h.now) != 5 || res.FiredNow != 5 {
		t.Fatalf("pass in the heavy flow: %+v, queued %d, fired %d; want the 5 due fired, nothing queued", res, len(h.later), len(h.now))
	}
	for _, c := range h.now {
		if c.Ahead || c.SchedTime.After(t0.Add(410*time.Millisecond)) {
			t.Errorf("fired %s due %s, ahead %v: want only due claims", c.Trigger(), c.SchedTime, c.Ahead)
		}
	}
}

// Once a heavy flow's partitions have fired directly for directFor, a pass looks at their whole
// window again, in one transaction over every partition as the passes before it: a transaction
// per partition, four at a time, made that pass the steady 5,000/s's latest every second.
func TestRunOnceLooksAgainAtAHeavyFlowInOneTransaction(t *testing.T) {
	f, clock, h, a := setup(t, 4) // Batch 10, FireAhead 1s
	heavyFlowPerPartition(t, f, clock, a)
	clock.Set(t0.Add(1600 * time.Millisecond)) // past directFor: the window is read again
	res, err := a.RunOnce(t.Context())
	if err != nil || res.FiredNow != 10 || res.Busy != 0 {
		t.Fatalf("pass after directFor: %+v, %v; want a full batch fired", res, err)
	}
	if h.fires != 1 {
		t.Errorf("the pass fired in %d transactions, want 1", h.fires)
	}
}

// heavyFlowPerPartition makes a heavy flow of 3 triggers in each of 4 partitions, due at
// t0+500ms, runs the pass that finds it (claiming nothing) and sets the clock past their time.
func heavyFlowPerPartition(t *testing.T, f *testenv.Fixture, clock *testenv.Clock, a *acquire.Acquirer) {
	t.Helper()
	for p, j := range jobPerPartition(t, f, 4) {
		for i := range 3 {
			f.Trigger(t, key(fmt.Sprint("t", p, i)), j, testenv.Repeating(time.Hour), t0.Add(500*time.Millisecond))
		}
	}
	if res, err := a.RunOnce(t.Context()); err != nil || !res.Direct || res.Claimed != 0 {
		t.Fatalf("pass over a dense window: %+v, %v; want a heavy flow, nothing claimed", res, err)
	}
	clock.Set(t0.Add(600 * time.Millisecond))
}

// A heavy flow's pass waits for a partition another transaction holds (another node's pass)
// instead of skipping it and backing off.
func TestRunOnceWaitsForAPartitionInAHeavyFlow(t *testing.T) {
	f, clock, h, a := setupConfig(t, 4, func(c *acquire.Config) { c.HeavyLockWait = time.Minute })
	heavyFlowPerPartition(t, f, clock, a)
	release := f.HoldPartition(t, 2)
	type result struct {
		res acquire.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := a.RunOnce(t.Context())
		done <- result{res, err}
	}()
	f.WaitLockWaiters(t, 1)
	release()
	r := <-done
	if r.err != nil || r.res.Busy != 0 || r.res.FiredNow != 10 || h.fires != 1 {
		t.Fatalf("pass behind a held partition: %+v, %v, %d transactions; want a full batch fired in one, none busy", r.res, r.err, h.fires)
	}
}

// It waits HeavyLockWait at most (100ms here): a partition held longer (its node stopped in the middle of a
// transaction) is skipped, and the others' due triggers fire.
func TestRunOnceSkipsAPartitionHeldLongInAHeavyFlow(t *testing.T) {
	f, clock, h, a := setup(t, 4)
	heavyFlowPerPartition(t, f, clock, a)
	f.HoldPartition(t, 2)
	res, err := a.RunOnce(t.Context())
	if err != nil || res.Busy != 1 || res.FiredNow != 9 {
		t.Fatalf("pass with a partition held throughout: %+v, %v; want 9 fired, 1 busy", res, err)
	}
	for _, c := range h.now {
		if c.Partition == 2 {
			t.Errorf("fired %s of the held partition", c.Trigger())
		}
	}
}

// A pass that claims a full batch leaves the node backlogged (the completion consumer yields to
// it) until a pass claims less.
func TestRunOnceReportsABacklog(t *testing.T) {
	f, _, h, a := setup(t, 1) // Batch 10
	f.Job(t, key("j"), false)
	for i := range 12 {
		f.Trigger(t, key(fmt.Sprint("t", i)), key("j"), testenv.Repeating(time.Hour), t0.Add(-time.Second))
	}
	if a.Backlogged() {
		t.Fatal("backlogged before any pass")
	}
	if res, err := a.RunOnce(t.Context()); err != nil || !res.Full || len(h.now) != 10 {
		t.Fatalf("first pass: %+v, %v, fired %d; want a full batch of 10", res, err, len(h.now))
	}
	if !a.Backlogged() {
		t.Fatal("not backlogged after a full batch")
	}
	// The fake firer leaves the triggers WAITING: keep 2 of them, as a real fire would have.
	f.Exec(t, `delete from triggers where sched_name = $1 and trigger_name not in ('t0', 't1')`, f.Namespace())
	if res, err := a.RunOnce(t.Context()); err != nil || res.Full || len(h.now) != 12 {
		t.Fatalf("second pass: %+v, %v, fired %d in all; want the 2 left", res, err, len(h.now))
	}
	if a.Backlogged() {
		t.Fatal("still backlogged after a pass that claimed less than a batch")
	}
}

// Quartz acquires at most one trigger of a non-concurrent job per batch.
func TestRunOnceOneTriggerPerNonconcurrentJob(t *testing.T) {
	f, _, h, a := setup(t, 1)
	f.Job(t, key("nc"), true)
	f.Trigger(t, key("a"), key("nc"), testenv.Repeating(time.Minute), t0.Add(-2*time.Second))
	f.Trigger(t, key("b"), key("nc"), testenv.Repeating(time.Minute), t0.Add(-time.Second))
	if _, err := a.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(h.now) != 1 || h.now[0].Trigger() != key("a") {
		t.Fatalf("claimed %+v, want only the earlier trigger of the non-concurrent job", h.now)
	}
}

// An acquirer skips a partition another node holds instead of queueing behind it.
func TestRunOnceSkipsHeldPartition(t *testing.T) {
	f, _, h, a := setup(t, 2)
	f.Job(t, key("j"), false)
	f.Trigger(t, key("due"), key("j"), testenv.Repeating(time.Minute), t0.Add(-time.Second))
	p := f.Locks.PartitionOf("g", "j")
	release := f.HoldPartition(t, p)
	if res, err := a.RunOnce(t.Context()); err != nil || res.Claimed != 0 {
		t.Fatalf("pass while partition %d is held: %+v, %v; want nothing claimed", p, res, err)
	}
	release()
	if res, err := a.RunOnce(t.Context()); err != nil || res.Claimed != 1 || len(h.now) != 1 {
		t.Fatalf("pass after release: %+v, %v", res, err)
	}
}

// After a pass that claimed little, a pass takes every partition no other transaction holds in
// one transaction: it claims in each of them, each claim under its own job's partition, and
// counts the held partition as busy.
func TestRunOnceTakesALightFlowInOneTransaction(t *testing.T) {
	f, _, h, a := setup(t, 4)
	jobs := jobPerPartition(t, f, 4)
	if res, err := a.RunOnce(t.Context()); err != nil || res.Claimed != 0 {
		t.Fatalf("first pass, nothing due: %+v, %v", res, err) // a light flow from now on
	}
	for p, j := range jobs {
		f.Trigger(t, key(fmt.Sprint("due", p)), j, testenv.Repeating(time.Minute), t0.Add(-time.Second))
		// Spread over most of the window, as a light flow is (heavy: at their density).
		f.Trigger(t, key(fmt.Sprint("ahead", p)), j, testenv.Repeating(time.Minute), t0.Add(900*time.Millisecond))
	}
	held := 2
	release := f.HoldPartition(t, held)
	res, err := a.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != 6 || res.FiredNow != 3 || res.Busy != 1 || res.Direct {
		t.Fatalf("light pass with partition %d held: %+v, want 6 claimed (3 due), 1 busy", held, res)
	}
	// One transaction wrote the three partitions' ACQUIRED fired rows.
	if n := f.Count(t, `select count(distinct xmin::text) from fired_triggers where sched_name = $1`); n != 1 {
		t.Errorf("the light pass's claims were written by %d transactions, want 1", n)
	}
	for _, c := range append(slices.Clone(h.now), h.later...) {
		if c.Partition == held || c.Partition != f.Locks.PartitionOf(c.JobGroup, c.JobName) {
			t.Errorf("claim of %s under partition %d; its job's is %d, %d is held", c.Trigger(), c.Partition,
				f.Locks.PartitionOf(c.JobGroup, c.JobName), held)
		}
	}
	// Released, the partition's triggers are claimed too (the due ones fired above are due
	// again: this test's firer leaves the rows as they were).
	release()
	h.now, h.later = nil, nil
	if res, err := a.RunOnce(t.Context()); err != nil || res.Busy != 0 {
		t.Fatalf("pass after release: %+v, %v", res, err)
	}
	var inHeld []string
	for _, c := range append(slices.Clone(h.now), h.later...) {
		if c.Partition == held {
			inHeld = append(inHeld, c.TriggerName)
		}
	}
	if slices.Sort(inHeld); !slices.Equal(inHeld, []string{fmt.Sprint("ahead", held), fmt.Sprint("due", held)}) {
		t.Fatalf("claims in partition %d after release: %v, want its due and ahead triggers", held, inHeld)
	}
}

// A heavy flow whose last pass claimed less than a full batch is fired in one transaction over
// every free partition, what is due only; a full batch sends the next pass back to a transaction
// per partition.
func TestRunOnceFiresAHeavyFlowInOneTransaction(t *testing.T) {
	f, clock, h, a := setup(t, 4) // Batch 10, FireAhead 1s
	jobs := jobPerPartition(t, f, 4)
	heavy := f.Locks.PartitionOf(jobs[0].Group, jobs[0].Name)
	for i := range 12 {
		f.Trigger(t, key(fmt.Sprint("h", i)), jobs[heavy], testenv.Repeating(time.Hour), t0.Add(time.Duration(i+1)*80*time.Millisecond))
	}
	if res, err := a.RunOnce(t.Context()); err != nil || !res.Direct || res.Claimed != 0 {
		t.Fatalf("first pass over a full window: %+v, %v; want partition %d in a heavy flow", res, err, heavy)
	}
	for p, j := range jobs {
		if p != heavy {
			f.Trigger(t, key(fmt.Sprint("l", p)), j, testenv.Repeating(time.Hour), t0.Add(300*time.Millisecond))
		}
	}
	clock.Set(t0.Add(410 * time.Millisecond))
	res, err := a.RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Direct || res.FiredNow != 8 || len(h.later) != 0 || h.fires != 1 {
		t.Fatalf("pass in the heavy flow: %+v, %d transactions fired, %d queued; want the 8 due (5 + 3 partitions' 1) fired in 1, none queued",
			res, h.fires, len(h.later))
	}
	// 14 due (this test's firer leaves the triggers WAITING), more than a batch: a full batch in
	// one transaction, then a transaction per partition.
	clock.Set(t0.Add(900 * time.Millisecond))
	if res, err := a.RunOnce(t.Context()); err != nil || !res.Full || h.fires != 2 {
		t.Fatalf("pass with 14 due: %+v, %v, %d transactions fired in all; want a full batch in one more", res, err, h.fires)
	}
	if _, err := a.RunOnce(t.Context()); err != nil || h.fires != 6 {
		t.Fatalf("pass after a full batch: %v, %d transactions fired in all; want one per partition (4 more)", err, h.fires)
	}
}

// The loop acquires when woken, long before its poll interval.
func TestRunWakesOnSignal(t *testing.T) {
	f := testenv.NewFixture(t, 1)
	clock := testenv.NewClock(t0)
	h := &handoff{}
	w := wake.New()
	a := acquire.New(acquire.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks,
		PollInterval: time.Hour, Now: clock.Now, Wake: w}, f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil), h, h)
	a.TestSignals.Pass.Init()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	if res := a.TestSignals.Pass.Wait(t); res.Claimed != 0 {
		t.Fatalf("first pass claimed %d on an empty namespace", res.Claimed)
	}
	f.Job(t, key("j"), false)
	f.Trigger(t, key("new"), key("j"), testenv.OneShot(), t0)
	w.Notify()
	if res := a.TestSignals.Pass.Wait(t); res.Claimed != 1 {
		t.Fatalf("woken pass claimed %d, want the new trigger", res.Claimed)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A pass that finds every partition held (a completion batch takes those of all its jobs) reads
// nothing, so nothing says when triggers are due: the loop looks again within milliseconds, not
// after its poll interval. A burst's fires used to wait up to a second behind each batch.
func TestRunRetriesSoonWhenEveryPartitionIsHeld(t *testing.T) {
	f := testenv.NewFixture(t, 4)
	clock := testenv.NewClock(t0)
	h := &handoff{}
	a := acquire.New(acquire.Config{Namespace: f.Namespace(), InstanceID: "n1", Locks: f.Locks,
		PollInterval: time.Hour, Now: clock.Now, Wake: wake.New()}, f.Pool, outbox.New(outbox.Config{Namespace: f.Namespace()}, f.Pool, nil), h, h)
	a.TestSignals.Pass.Init()
	f.Job(t, key("j"), false)
	f.Trigger(t, key("due"), key("j"), testenv.OneShot(), t0.Add(-time.Second))
	tx, err := f.Pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := f.Locks.All(t.Context(), tx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	if res := a.TestSignals.Pass.Wait(t); res.Busy != 4 || res.Claimed != 0 {
		t.Fatalf("pass while every partition is held: %+v, want 4 busy and nothing claimed", res)
	}
	_ = tx.Rollback(t.Context())
	// No wake, no poll for an hour: only the retry can claim the trigger.
	a.TestSignals.Pass.WaitUntil(t, func(r acquire.Result) bool { return r.Claimed == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(h.now) != 1 {
		t.Fatalf("fired %d claims, want the due trigger", len(h.now))
	}
}
