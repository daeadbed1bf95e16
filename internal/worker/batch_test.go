package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/worker"
)

// fireBatch publishes n JobFired for jobs of type typ in one message, as a scheduler node does
// with --fire-batch (docs/contract.md, "Batches of fires"), and returns them.
func (e *env) fireBatch(typ string, n int) []events.JobFired {
	e.t.Helper()
	fs := make([]events.JobFired, n)
	evs := make([]events.Event, n)
	for i := range n {
		fs[i], evs[i] = e.jobFired(typ, `{}`, "")
	}
	msg, err := events.BatchMessage(events.BatchID(evs), evs)
	if err != nil {
		e.t.Fatal(err)
	}
	e.publish(msg)
	return fs
}

// runs counts a handler's runs by fire and attempt.
type runs struct {
	mu sync.Mutex
	by map[uuid.UUID][]int // the attempts each fire ran as, in order
}

func (r *runs) add(job worker.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[uuid.UUID][]int{}
	}
	r.by[job.FireID] = append(r.by[job.FireID], job.Attempt)
}

func (r *runs) of(id uuid.UUID) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[id]
}

func TestFiresOfABatchEachRunOnceAndTheMessageIsAcked(t *testing.T) {
	e := newEnv(t)
	var ran runs
	reg := worker.NewRegistry()
	reg.Register("echo", func(ctx context.Context, job worker.Job) error {
		ran.add(job)
		return nil
	})
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	fs := e.fireBatch("echo", 7) // more than the worker's 4 run slots: some wait for one
	want := map[uuid.UUID]bool{}
	for _, f := range fs {
		want[f.FireID] = true
	}
	for range fs {
		o := next(t, outcomes)
		if o.typ != events.TypeJobCompleted || !want[o.res.FireID] || o.res.Attempt != 1 {
			t.Fatalf("outcome %s %+v; want JobCompleted at attempt 1 of a fire of the batch, each once", o.typ, o.res)
		}
		if tid := strings.Split(testTraceParent, "-")[1]; !strings.Contains(o.traceParent, tid) {
			t.Errorf("completion traceparent %q is not in the fire's trace %s", o.traceParent, tid)
		}
		delete(want, o.res.FireID)
	}
	info := e.waitSettled("echo")
	if info.Delivered.Consumer != 1 {
		t.Errorf("the consumer delivered %d messages, want the batch once", info.Delivered.Consumer)
	}
	for _, f := range fs {
		if got := ran.of(f.FireID); len(got) != 1 {
			t.Errorf("fire %s ran as attempts %v, want once", f.FireID, got)
		}
	}
}

// A retryable failure of one fire of a batch runs that fire again, not its batch-mates: the
// message is acknowledged once the retried fire ended.
func TestARetryInABatchRunsThatFireAloneAgain(t *testing.T) {
	e := newEnv(t)
	var ran runs
	var flaky uuid.UUID
	var once sync.Once
	reg := worker.NewRegistry()
	reg.Register("mixed", func(ctx context.Context, job worker.Job) error {
		ran.add(job)
		failed := false
		once.Do(func() { flaky, failed = job.FireID, true })
		if failed || (job.FireID == flaky && job.Attempt < 3) {
			return errors.New("downstream unavailable")
		}
		return nil
	})
	cfg := e.testConfig("w1")
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()

	fs := e.fireBatch("mixed", 3)
	var completed, failed int
	for completed < len(fs) {
		o := next(t, outcomes)
		switch {
		case o.typ == events.TypeJobCompleted:
			completed++
		case o.typ == events.TypeJobFailed && o.res.Error != nil && !o.res.Error.Final && o.res.FireID == flaky:
			failed++
			if o.res.Attempt != failed {
				t.Errorf("failure %d of the flaky fire reported attempt %d", failed, o.res.Attempt)
			}
		default:
			t.Fatalf("outcome %s %+v error %+v; want completions and the flaky fire's non-final failures", o.typ, o.res, o.res.Error)
		}
	}
	e.waitSettled("mixed")
	if failed != 2 {
		t.Errorf("the flaky fire failed %d times, want 2", failed)
	}
	for _, f := range fs {
		want := []int{1}
		if f.FireID == flaky {
			want = []int{1, 2, 3}
		}
		if got := ran.of(f.FireID); !slices.Equal(got, want) {
			t.Errorf("fire %s ran as attempts %v, want %v", f.FireID, got, want)
		}
	}
}

func TestAMalformedFireOfABatchIsDroppedAndTheOthersRun(t *testing.T) {
	e := newEnv(t)
	reg := worker.NewRegistry()
	reg.Register("ok", func(ctx context.Context, job worker.Job) error { return nil })
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	good, ev := e.jobFired("ok", `{}`, "")
	bad, badEv := e.jobFired("ok", `{}`, "")
	badEv.Data = []byte(`{"fireId":"` + bad.FireID.String() + `","job":{"group":"g","name":"n","type":"other"}}`)
	msg, err := events.BatchMessage(events.BatchID([]events.Event{badEv, ev}), []events.Event{badEv, ev})
	if err != nil {
		t.Fatal(err)
	}
	e.publish(msg)
	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != good.FireID {
		t.Fatalf("outcome = %s %+v; want the valid fire completed", o.typ, o.res)
	}
	e.waitSettled("ok") // acknowledged, not redelivered
	if n := e.doneCount(); n != 1 {
		t.Errorf("DONE stream holds %d outcomes, want 1", n)
	}
}

// A batch is delivered again whole when its worker dies before every fire in it ended. The
// worker it goes to asks the scheduler which of its fires still run (the executing query) and
// runs those alone; when no scheduler answers, it runs them all.
func TestABatchDeliveredAgainRunsTheFiresThatHadNotEnded(t *testing.T) {
	for _, answered := range []bool{true, false} {
		t.Run(fmt.Sprintf("scheduler answers=%v", answered), func(t *testing.T) {
			e := newEnv(t)
			fs := make([]events.JobFired, 3)
			evs := make([]events.Event, 3)
			for i := range fs {
				fs[i], evs[i] = e.jobFired("work", `{}`, "")
			}
			stuck := fs[2].FireID
			asked := make(chan []uuid.UUID, 1)
			if answered {
				// The scheduler's answer: of the fires asked about, the stuck one is still executing.
				sub, err := e.nc.Subscribe(events.Subjects(e.ns).API("executing"), func(m *nats.Msg) {
					var q struct {
						FireIDs []uuid.UUID `json:"fireIds"`
					}
					if err := json.Unmarshal(m.Data, &q); err != nil {
						t.Errorf("executing query %s: %v", m.Data, err)
					}
					asked <- q.FireIDs
					_ = m.Respond([]byte(`{"ok":true,"query":"executing","result":{"executions":[{"fireId":"` + stuck.String() + `"}]}}`))
				})
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
			}

			started, release := make(chan struct{}), make(chan struct{})
			regA := worker.NewRegistry()
			regA.Register("work", func(ctx context.Context, job worker.Job) error {
				if job.FireID == stuck {
					close(started)
					<-release // stuck until the test lets go, well after its connection died
				}
				return nil
			})
			ncA, jsA := connect(t, e.url)
			e.startWorker(jsA, e.testConfig("worker-a"), regA)
			outcomes := e.watchDone()
			msg, err := events.BatchMessage(events.BatchID(evs), evs)
			if err != nil {
				t.Fatal(err)
			}
			e.publish(msg)
			for range 2 {
				if o := next(t, outcomes); o.typ != events.TypeJobCompleted || o.res.FireID == stuck || o.res.Worker != "worker-a" {
					t.Fatalf("outcome %s %+v; want worker-a's completions of the two fires that do not stick", o.typ, o.res)
				}
			}
			select {
			case <-started:
			case <-time.After(waitFor):
				t.Fatal("worker A never started the stuck fire")
			}
			ncA.Close() // worker A's process "dies": no more heartbeats, no ack
			defer close(release)

			var ranB runs
			regB := worker.NewRegistry()
			regB.Register("work", func(ctx context.Context, job worker.Job) error {
				ranB.add(job)
				return nil
			})
			_, jsB := connect(t, e.url)
			e.startWorker(jsB, e.testConfig("worker-b"), regB)
			want := 3 // every fire again, unanswered
			if answered {
				want = 1
				if got := <-asked; len(got) != 3 {
					t.Errorf("worker B asked about fires %v; want the batch's 3", got)
				}
			}
			for range want {
				if o := next(t, outcomes); o.typ != events.TypeJobCompleted || o.res.Worker != "worker-b" || o.res.Attempt != 2 {
					t.Fatalf("outcome %s %+v; want worker-b's completion at attempt 2", o.typ, o.res)
				}
			}
			e.waitSettled("work")
			if got := ranB.of(stuck); !slices.Equal(got, []int{2}) {
				t.Errorf("worker B ran the stuck fire as attempts %v, want [2]", got)
			}
			for _, f := range fs[:2] {
				if got, wantRuns := len(ranB.of(f.FireID)), want/3; got != wantRuns {
					t.Errorf("worker B ran the ended fire %s %d times, want %d", f.FireID, got, wantRuns)
				}
			}
		})
	}
}

// A worker holds at most Concurrency fires and one batch more: batches it has no room for stay
// in the stream for the other workers.
func TestAWorkerTakesNoMoreBatchesThanItHasRoomFor(t *testing.T) {
	e := newEnv(t)
	started, release := make(chan struct{}, 16), make(chan struct{})
	reg := worker.NewRegistry()
	reg.Register("slow", func(ctx context.Context, job worker.Job) error {
		started <- struct{}{}
		<-release
		return nil
	})
	cfg := e.testConfig("w1") // 4 run slots
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()
	for range 3 {
		e.fireBatch("slow", cfg.Concurrency)
	}
	for range cfg.Concurrency {
		select {
		case <-started:
		case <-time.After(waitFor):
			t.Fatal("the first batch's fires did not all start")
		}
	}
	c, err := e.js.Consumer(t.Context(), events.StreamFired(e.ns), events.WorkerDurable("slow"))
	if err != nil {
		t.Fatal(err)
	}
	// The consumer counts the stream's new messages as it hears of them: wait until it counts
	// all three (there is no signal to wait for but its counts).
	var info *jetstream.ConsumerInfo
	for deadline := time.Now().Add(waitFor); ; time.Sleep(20 * time.Millisecond) {
		if info, err = c.Info(t.Context()); err != nil {
			t.Fatal(err)
		}
		if info.NumAckPending+int(info.NumPending) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if info.NumAckPending != 1 || info.NumPending != 2 {
		t.Errorf("the worker holds %d messages and left %d; want 1 batch held (its %d fires fill its slots) and 2 left",
			info.NumAckPending, info.NumPending, cfg.Concurrency)
	}
	close(release)
	for range 3 * cfg.Concurrency {
		if o := next(t, outcomes); o.typ != events.TypeJobCompleted {
			t.Fatalf("outcome %s %+v; want completions", o.typ, o.res)
		}
	}
	e.waitSettled("slow")
}
