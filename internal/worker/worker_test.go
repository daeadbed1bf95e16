package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// waitFor bounds every wait on something the worker does asynchronously.
const waitFor = 20 * time.Second

type env struct {
	t   testing.TB
	url string
	ns  string
	nc  *nats.Conn // the test's own connection: publishing fires, watching outcomes
	js  jetstream.JetStream
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, url: testenv.NATS(t), ns: testenv.Namespace(t)}
	e.nc, e.js = connect(t, e.url)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if err := events.EnsureStreams(ctx, e.js, e.ns); err != nil {
		t.Fatal(err)
	}
	return e
}

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return testenv.JetStream(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
}

// testConfig is a worker configuration with short timings, so redeliveries happen within a test.
func (e *env) testConfig(instance string) worker.Config {
	return worker.Config{
		Namespace:    e.ns,
		InstanceID:   instance,
		Concurrency:  4,
		AckWait:      time.Second,
		MaxDeliver:   3,
		RetryDelay:   50 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
		Logger:       testLogger(e.t),
	}
}

// running is a worker started by startWorker.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
	err    error         // what Run returned, once done is closed
}

// wait waits for Run to return and returns its result.
func (r *running) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(waitFor):
		tb.Fatal("worker's Run did not return")
		return nil
	}
}

// startWorker runs a worker on js until the test ends.
func (e *env) startWorker(js jetstream.JetStream, cfg worker.Config, reg *worker.Registry) *running {
	e.t.Helper()
	w, err := worker.New(cfg, js, reg)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.run(w, reg)
}

// run runs w, made for the types of reg, until the test ends.
func (e *env) run(w *worker.Worker, reg *worker.Registry) *running {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() { r.err = w.Run(ctx); close(r.done) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(waitFor):
		}
	})
	e.waitConsumers(reg)
	return r
}

// startCounter starts a worker of its own connection whose jobs of type typ do nothing but
// count their runs.
func (e *env) startCounter(instance, typ string) *atomic.Int32 {
	e.t.Helper()
	var ran atomic.Int32
	reg := worker.NewRegistry()
	reg.Register(typ, func(ctx context.Context, job worker.Job) error {
		ran.Add(1)
		return nil
	})
	_, js := connect(e.t, e.url)
	e.startWorker(js, e.testConfig(instance), reg)
	return &ran
}

// waitConsumers waits until the worker's durable consumers exist, so that a fire published next
// is delivered to it (DeliverAll would deliver it anyway; this keeps failures readable).
func (e *env) waitConsumers(reg *worker.Registry) {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for _, typ := range reg.Types() {
		for {
			_, err := e.js.Consumer(context.Background(), events.StreamFired(e.ns), events.WorkerDurable(typ))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("consumer %s never appeared: %v", events.WorkerDurable(typ), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// fire publishes a JobFired for a job of type typ, with a traceparent, and returns it.
func (e *env) fire(typ string, data string, timeout string) events.JobFired {
	e.t.Helper()
	f, ev := e.jobFired(typ, data, timeout)
	msg, err := events.Message(ev)
	if err != nil {
		e.t.Fatal(err)
	}
	e.publish(msg)
	return f
}

// publish stores msg in the namespace's FIRED stream.
func (e *env) publish(msg *nats.Msg) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		e.t.Fatalf("publish JobFired: %v", err)
	}
}

// jobFired makes a JobFired for a job of type typ, with a traceparent, and its event.
func (e *env) jobFired(typ string, data string, timeout string) (events.JobFired, events.Event) {
	e.t.Helper()
	f := events.JobFired{
		FireID:        uuid.Must(uuid.NewV7()),
		Job:           events.JobRef{Group: "g", Name: "job-" + typ, Type: typ},
		Trigger:       events.Key{Group: "g", Name: "t"},
		Data:          json.RawMessage(data),
		ScheduledTime: time.Now().UTC().Truncate(time.Millisecond),
		FiredTime:     time.Now().UTC().Truncate(time.Millisecond),
		Timeout:       timeout,
		TriggerState:  "COMPLETE",
	}
	ev, err := events.New(events.TypeJobFired, events.Source(e.ns, "test"), events.AggregateJob,
		f.Job.Key().String(), events.Subjects(e.ns).Fired(typ), time.Now(), f)
	if err != nil {
		e.t.Fatal(err)
	}
	ev.TraceParent = testTraceParent
	return f, ev
}

const testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// outcome is a JobCompleted or JobFailed seen on done.<type>.
type outcome struct {
	typ         string
	traceParent string
	res         events.JobResult
}

// watchDone collects the outcomes stored in the namespace's DONE stream, through an ordered
// consumer: what the scheduler's completion consumer would see (a core subscription would also
// see the copies JetStream drops by Nats-Msg-Id).
func (e *env) watchDone() <-chan outcome {
	e.t.Helper()
	ctx := context.Background()
	cons, err := e.js.OrderedConsumer(ctx, events.StreamDone(e.ns), jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(chan outcome, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		bodies, err := events.Bodies(m.Headers(), m.Data())
		if err != nil {
			e.t.Errorf("undecodable message on %s: %v", m.Subject(), err)
			return
		}
		for _, b := range bodies {
			var res events.JobResult
			envl, err := events.Decode(b, &res)
			if err != nil {
				e.t.Errorf("undecodable outcome on %s: %v", m.Subject(), err)
				return
			}
			out <- outcome{typ: envl.Type, traceParent: cmp.Or(envl.TraceParent, m.Headers().Get("traceparent")), res: res}
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(cc.Stop)
	return out
}

func next(tb testing.TB, ch <-chan outcome) outcome {
	tb.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(waitFor):
		tb.Fatal("no JobCompleted/JobFailed arrived")
		return outcome{}
	}
}

// waitSettled waits until the consumer of typ has no message pending or unacknowledged: every
// fire was acked or terminated, so none can be delivered again.
func (e *env) waitSettled(typ string) *jetstream.ConsumerInfo {
	e.t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		c, err := e.js.Consumer(context.Background(), events.StreamFired(e.ns), events.WorkerDurable(typ))
		if err != nil {
			e.t.Fatal(err)
		}
		info, err := c.Info(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 && info.Delivered.Stream > 0 {
			return info
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("consumer %s did not settle: pending %d, ack pending %d, redelivered %d",
				events.WorkerDurable(typ), info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// doneCount is how many messages the DONE stream holds for the namespace: how many outcomes,
// when they were published one at a time (a worker batches only outcomes that wait together).
func (e *env) doneCount() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), events.StreamDone(e.ns))
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

func TestJobCompletes(t *testing.T) {
	e := newEnv(t)
	got := make(chan worker.Job, 1)
	reg := worker.NewRegistry()
	reg.Register("echo", func(ctx context.Context, job worker.Job) error {
		got <- job
		return nil
	})
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	f := e.fire("echo", `{"k":"v"}`, "")
	job := <-got
	if job.FireID != f.FireID || job.Attempt != 1 || string(job.Data) != `{"k":"v"}` || job.Job != f.Job {
		t.Errorf("handler got fire %s attempt %d data %s job %+v; want %s, 1, {\"k\":\"v\"}, %+v",
			job.FireID, job.Attempt, job.Data, job.Job, f.FireID, f.Job)
	}
	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted {
		t.Fatalf("outcome type %s, want %s (error %+v)", o.typ, events.TypeJobCompleted, o.res.Error)
	}
	r := o.res
	if r.FireID != f.FireID || r.Attempt != 1 || r.Worker != "w1" || r.Job != f.Job || r.Trigger != f.Trigger ||
		!r.ScheduledTime.Equal(f.ScheduledTime) || r.TriggerState != f.TriggerState || r.Error != nil {
		t.Errorf("JobCompleted = %+v; want fire %s attempt 1 worker w1 trigger state %s", r, f.FireID, f.TriggerState)
	}
	if r.StartedTime.IsZero() || r.FinishedTime.Before(r.StartedTime) {
		t.Errorf("started %v finished %v", r.StartedTime, r.FinishedTime)
	}
	// The completion continues the fire's trace.
	if tid := strings.Split(testTraceParent, "-")[1]; !strings.Contains(o.traceParent, tid) {
		t.Errorf("completion traceparent %q is not in trace %s", o.traceParent, tid)
	}
	e.waitSettled("echo")
}

func TestRetryableFailureRetriedThenFinal(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	reg := worker.NewRegistry()
	reg.Register("flaky", func(ctx context.Context, job worker.Job) error {
		calls.Add(1)
		return errors.New("downstream unavailable")
	})
	cfg := e.testConfig("w1")
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()

	f := e.fire("flaky", `{}`, "")
	for attempt := 1; attempt <= cfg.MaxDeliver; attempt++ {
		o := next(t, outcomes)
		r := o.res
		final := attempt == cfg.MaxDeliver
		if o.typ != events.TypeJobFailed || r.FireID != f.FireID || r.Attempt != attempt || r.Error == nil ||
			!r.Error.Retryable || r.Error.Final != final || !strings.Contains(r.Error.Message, "downstream unavailable") {
			t.Fatalf("outcome %d = %s %+v error %+v; want JobFailed attempt %d retryable final=%v",
				attempt, o.typ, r, r.Error, attempt, final)
		}
	}
	e.waitSettled("flaky")
	if n := calls.Load(); n != int32(cfg.MaxDeliver) {
		t.Errorf("handler ran %d times, want %d", n, cfg.MaxDeliver)
	}
}

func TestPermanentFailureIsFinalAtOnce(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	reg := worker.NewRegistry()
	reg.Register("bad", func(ctx context.Context, job worker.Job) error {
		calls.Add(1)
		return worker.Permanent(errors.New("job data names no report"))
	})
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	f := e.fire("bad", `{}`, "")
	o := next(t, outcomes)
	if o.typ != events.TypeJobFailed || o.res.FireID != f.FireID || o.res.Attempt != 1 || o.res.Error == nil ||
		o.res.Error.Retryable || !o.res.Error.Final {
		t.Fatalf("outcome = %s %+v error %+v; want JobFailed attempt 1, not retryable, final", o.typ, o.res, o.res.Error)
	}
	e.waitSettled("bad") // acked: it cannot run again
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

func TestPanicIsAFailure(t *testing.T) {
	e := newEnv(t)
	reg := worker.NewRegistry()
	reg.Register("boom", func(ctx context.Context, job worker.Job) error { panic("nil map") })
	cfg := e.testConfig("w1")
	cfg.MaxDeliver = 1
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()

	e.fire("boom", `{}`, "")
	o := next(t, outcomes)
	if o.typ != events.TypeJobFailed || o.res.Error == nil || !o.res.Error.Final ||
		!strings.Contains(o.res.Error.Message, "panicked: nil map") {
		t.Fatalf("outcome = %s error %+v; want final JobFailed naming the panic", o.typ, o.res.Error)
	}
	e.waitSettled("boom")
}

func TestJobTimeoutFromFiredEvent(t *testing.T) {
	e := newEnv(t)
	reg := worker.NewRegistry()
	reg.Register("slow", func(ctx context.Context, job worker.Job) error {
		<-ctx.Done()
		return ctx.Err()
	})
	cfg := e.testConfig("w1")
	cfg.MaxDeliver = 1
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()

	e.fire("slow", `{}`, "200ms") // as the scheduler writes it: time.Duration.String
	o := next(t, outcomes)
	if o.typ != events.TypeJobFailed || o.res.Error == nil || !strings.Contains(o.res.Error.Message, "timed out after 200ms") {
		t.Fatalf("outcome = %s error %+v; want JobFailed saying it timed out after 200ms", o.typ, o.res.Error)
	}
}

func TestLongJobHeartbeatsAndIsNotRedelivered(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	reg := worker.NewRegistry()
	reg.Register("long", func(ctx context.Context, job worker.Job) error {
		calls.Add(1)
		// The job itself: three and a half AckWaits of work.
		select {
		case <-time.After(3500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	f := e.fire("long", `{}`, "")
	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != f.FireID || o.res.Attempt != 1 {
		t.Fatalf("outcome = %s %+v; want JobCompleted attempt 1", o.typ, o.res)
	}
	e.waitSettled("long") // NumRedelivered == 0
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1 (the fire was redelivered while running)", n)
	}
}

func TestDeadWorkersJobIsRedeliveredToAnother(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	release := make(chan struct{})
	regA := worker.NewRegistry()
	regA.Register("work", func(ctx context.Context, job worker.Job) error {
		close(started)
		<-release // stuck until the test lets go, well after its connection died
		return nil
	})
	ncA, jsA := connect(t, e.url)
	a := e.startWorker(jsA, e.testConfig("worker-a"), regA)
	outcomes := e.watchDone()

	f := e.fire("work", `{}`, "")
	select {
	case <-started:
	case <-time.After(waitFor):
		t.Fatal("worker A never started the job")
	}
	ncA.Close() // worker A's process "dies": no more heartbeats, no ack

	ranB := e.startCounter("worker-b", "work")

	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != f.FireID || o.res.Worker != "worker-b" || o.res.Attempt != 2 {
		t.Fatalf("outcome = %s %+v; want JobCompleted by worker-b at attempt 2", o.typ, o.res)
	}
	close(release) // A's handler returns now; A cannot publish or ack any more
	if err := a.wait(t); err == nil || !strings.Contains(err.Error(), "connection closed") {
		t.Errorf("worker A's Run returned %v; want an error saying its connection closed", err)
	}
	e.waitSettled("work")
	if n := e.doneCount(); n != 1 {
		t.Errorf("DONE stream holds %d outcomes for the fire, want exactly 1", n)
	}
	if n := ranB.Load(); n != 1 {
		t.Errorf("worker B ran the job %d times, want 1", n)
	}
}

func TestMalformedMessageIsTerminated(t *testing.T) {
	e := newEnv(t)
	reg := worker.NewRegistry()
	reg.Register("ok", func(ctx context.Context, job worker.Job) error { return nil })
	e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	subject := events.Subjects(e.ns).Fired("ok")
	for _, body := range []string{
		"not json",
		`{"specversion":"1.0","id":"not-a-uuid","type":"agate.job.fired","data":{}}`,
		`{"specversion":"1.0","id":"` + uuid.NewString() + `","type":"agate.job.fired","data":{"job":{"group":"g","name":"n","type":"ok"}}}`,
		`{"specversion":"1.0","id":"` + uuid.NewString() + `","type":"agate.job.fired","data":{"fireId":"` +
			uuid.NewString() + `","job":{"group":"g","name":"n","type":"other"}}}`,
	} {
		if _, err := e.js.Publish(context.Background(), subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	f := e.fire("ok", `{}`, "")
	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != f.FireID {
		t.Fatalf("outcome = %s %+v; want the valid fire completed", o.typ, o.res)
	}
	info := e.waitSettled("ok") // the garbage was terminated, not redelivered
	if info.Delivered.Stream != 5 {
		t.Errorf("consumer delivered up to stream seq %d, want 5", info.Delivered.Stream)
	}
	if n := e.doneCount(); n != 1 {
		t.Errorf("DONE stream holds %d outcomes, want 1", n)
	}
}

func TestShutdownDrainsRunningJobs(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	release := make(chan struct{})
	reg := worker.NewRegistry()
	reg.Register("drain", func(ctx context.Context, job worker.Job) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	r := e.startWorker(e.js, e.testConfig("w1"), reg)
	outcomes := e.watchDone()

	f := e.fire("drain", `{}`, "")
	<-started
	r.cancel() // stop fetching; the running job may finish
	close(release)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run returned %v, want nil", err)
	}
	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != f.FireID {
		t.Fatalf("outcome = %s %+v; want the drained job completed", o.typ, o.res)
	}
	e.waitSettled("drain")
}

func TestHTTPJobThroughWorker(t *testing.T) {
	e := newEnv(t)
	srv := newHTTPServer(t)
	reg := worker.NewRegistry()
	// The server listens on loopback, which http jobs may reach only when allowed.
	worker.RegisterBuiltins(reg, guardedOptions(t, "127.0.0.1/32"))
	cfg := e.testConfig("w1")
	cfg.MaxDeliver = 1
	e.startWorker(e.js, cfg, reg)
	outcomes := e.watchDone()

	ok := e.fire(worker.TypeHTTP, `{"url":"`+srv.URL+`/ok"}`, "")
	failed := e.fire(worker.TypeHTTP, `{"url":"`+srv.URL+`/fail"}`, "")
	refused := e.fire(worker.TypeHTTP, `{"url":"http://169.254.169.254/latest/meta-data/"}`, "")
	seen := map[uuid.UUID]outcome{}
	for range 3 {
		o := next(t, outcomes)
		seen[o.res.FireID] = o
	}
	if o := seen[ok.FireID]; o.typ != events.TypeJobCompleted {
		t.Errorf("GET /ok: outcome %s error %+v, want completed", o.typ, o.res.Error)
	}
	if o := seen[failed.FireID]; o.typ != events.TypeJobFailed || o.res.Error == nil ||
		!strings.Contains(o.res.Error.Message, "500") || !o.res.Error.Final {
		t.Errorf("GET /fail: outcome %s error %+v, want final JobFailed naming status 500", o.typ, o.res.Error)
	}
	// A refused destination is not retryable, and the message says how to allow it.
	if o := seen[refused.FireID]; o.typ != events.TypeJobFailed || o.res.Error == nil || o.res.Error.Retryable ||
		!strings.Contains(o.res.Error.Message, "169.254.169.254 is a cloud metadata address") ||
		!strings.Contains(o.res.Error.Message, "--http-allow") {
		t.Errorf("GET 169.254.169.254: outcome %s %+v error %+v, want a JobFailed, not retryable, saying how to allow it", o.typ, o.res, o.res.Error)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	reg := worker.NewRegistry()
	reg.Register("x", func(context.Context, worker.Job) error { return nil })
	nc, js := connect(t, testenv.NATS(t))
	_ = nc
	for name, tc := range map[string]struct {
		cfg worker.Config
		reg *worker.Registry
	}{
		"bad namespace":  {worker.Config{Namespace: "a.b", InstanceID: "i"}, reg},
		"no instance":    {worker.Config{Namespace: "ns"}, reg},
		"no types":       {worker.Config{Namespace: "ns", InstanceID: "i"}, worker.NewRegistry()},
		"short ack wait": {worker.Config{Namespace: "ns", InstanceID: "i", AckWait: time.Millisecond}, reg},
		"negative":       {worker.Config{Namespace: "ns", InstanceID: "i", Concurrency: -1}, reg},
	} {
		if _, err := worker.New(tc.cfg, js, tc.reg); err == nil {
			t.Errorf("%s: New succeeded, want an error", name)
		}
	}
	if _, err := worker.New(worker.Config{Namespace: "ns", InstanceID: "i"}, js, reg); err != nil {
		t.Errorf("New with defaults: %v", err)
	}
}

// testLogger sends the worker's logs to t.Log while the test runs.
func testLogger(tb testing.TB) *slog.Logger {
	w := &tWriter{tb: tb}
	tb.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	mu   sync.Mutex
	tb   testing.TB
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func TestLastDeliveryLostBecomesFinalFailure(t *testing.T) {
	e := newEnv(t)
	cfg := e.testConfig("survivor")
	cfg.MaxDeliver = 2

	// A worker of another type: it runs none of the fires below, but answers the dead letters of
	// every type of the namespace.
	other := worker.NewRegistry()
	other.Register("other", func(context.Context, worker.Job) error { return nil })
	e.startWorker(e.js, cfg, other)
	outcomes := e.watchDone()

	// Each delivery of the fire goes to a worker that dies while running it.
	f := e.fire("doomed", `{}`, "")
	for attempt := 1; attempt <= cfg.MaxDeliver; attempt++ {
		started := make(chan int, 1)
		reg := worker.NewRegistry()
		reg.Register("doomed", func(ctx context.Context, job worker.Job) error {
			started <- job.Attempt
			<-ctx.Done() // until its worker is gone
			return ctx.Err()
		})
		nc, js := connect(t, e.url)
		dying := cfg
		dying.InstanceID = fmt.Sprintf("dying-%d", attempt)
		dying.DrainTimeout = 10 * time.Millisecond
		r := e.startWorker(js, dying, reg)
		select {
		case got := <-started:
			if got != attempt {
				t.Fatalf("delivery %d ran as attempt %d", attempt, got)
			}
		case <-time.After(waitFor):
			t.Fatalf("attempt %d never started", attempt)
		}
		nc.Close()
		_ = r.wait(t)
	}
	// JetStream finds the fire out of deliveries, and sends the advisory, when a worker of its
	// type asks for fires: one is started again, as after a crash. It never runs the fire.
	restarted := worker.NewRegistry()
	var ran atomic.Int32
	restarted.Register("doomed", func(context.Context, worker.Job) error { ran.Add(1); return nil })
	again := cfg
	again.InstanceID = "restarted"
	e.startWorker(e.js, again, restarted)

	o := next(t, outcomes)
	if o.typ != events.TypeJobFailed || o.res.FireID != f.FireID || o.res.Attempt != cfg.MaxDeliver ||
		(o.res.Worker != "survivor" && o.res.Worker != "restarted") || o.res.TriggerState != f.TriggerState ||
		o.res.Error == nil || !o.res.Error.Final {
		t.Fatalf("outcome = %s %+v error %+v; want a final JobFailed for attempt %d from a live worker",
			o.typ, o.res, o.res.Error, cfg.MaxDeliver)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the restarted worker ran the fire that had run out of deliveries %d times", n)
	}
	if !strings.Contains(o.traceParent, strings.Split(testTraceParent, "-")[1]) {
		t.Errorf("dead-letter outcome traceparent %q is not in the fire's trace", o.traceParent)
	}
}

func TestSurvivesNATSRestart(t *testing.T) {
	srv := testenv.StartNATS(t)
	e := &env{t: t, url: srv.URL(), ns: testenv.Namespace(t)}
	e.nc, e.js = connect(t, e.url)
	if err := events.EnsureStreams(context.Background(), e.js, e.ns); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	returned := make(chan struct{}, 1)
	release := make(chan struct{})
	reg := worker.NewRegistry()
	reg.Register("blocking", func(ctx context.Context, job worker.Job) error {
		defer func() { returned <- struct{}{} }()
		started <- struct{}{}
		<-release
		return nil
	})
	reg.Register("quick", func(context.Context, worker.Job) error { return nil })
	cfg := e.testConfig("w1")
	cfg.AckWait = 5 * time.Second // the outage below is shorter: no redelivery is expected
	_, jsW := connect(t, e.url)
	e.startWorker(jsW, cfg, reg)
	outcomes := e.watchDone()

	f := e.fire("blocking", `{}`, "")
	<-started
	srv.Shutdown() // NATS goes away while the job runs...
	close(release)
	<-returned // ...and is still away when the worker publishes the outcome
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}

	o := next(t, outcomes)
	if o.typ != events.TypeJobCompleted || o.res.FireID != f.FireID {
		t.Fatalf("outcome = %s %+v; want the job run across the outage completed", o.typ, o.res)
	}
	e.waitSettled("blocking")

	// The worker fetches again after the restart.
	g := e.fire("quick", `{}`, "")
	if o := next(t, outcomes); o.typ != events.TypeJobCompleted || o.res.FireID != g.FireID {
		t.Fatalf("outcome = %s %+v; want a fire published after the restart completed", o.typ, o.res)
	}
	// A completion published again after the reconnect was dropped as a duplicate (Nats-Msg-Id).
	if n := e.doneCount(); n != 2 {
		t.Errorf("DONE stream holds %d outcomes, want 2", n)
	}
}

func TestRunWithCancelledContextReturnsNil(t *testing.T) {
	e := newEnv(t)
	reg := worker.NewRegistry()
	reg.Register("x", func(context.Context, worker.Job) error { return nil })
	w, err := worker.New(e.testConfig("w1"), e.js, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run with a cancelled context = %v, want nil", err)
	}
}

// logBuffer keeps what a worker logs, for tests that look for a line.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A worker started before any scheduler does not create the streams: it says once that it waits
// for them, looks again with back-off, and starts when a scheduler has created them.
func TestWaitsForASchedulerToCreateTheStreams(t *testing.T) {
	e := &env{t: t, url: testenv.NATS(t), ns: testenv.Namespace(t)}
	e.nc, e.js = connect(t, e.url)
	logs := &logBuffer{}
	cfg := e.testConfig("w1")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := worker.NewRegistry()
	reg.Register("echo", func(context.Context, worker.Job) error { return nil })
	w, err := worker.New(cfg, e.js, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const waiting = "waiting for a scheduler to create the streams of namespace "
	deadline := time.Now().Add(waitFor)
	for !strings.Contains(logs.String(), waiting+e.ns) {
		if time.Now().After(deadline) {
			t.Fatalf("the worker never said it waits for the streams; it logged:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // several more looks, with back-off
	for _, name := range []string{events.StreamFired(e.ns), events.StreamDone(e.ns), events.StreamCommands(e.ns)} {
		if _, err := e.js.Stream(context.Background(), name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Errorf("stream %s: %v; want it not created by the worker", name, err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned while waiting for the streams: %v", err)
	default:
	}

	ensureCtx, cancelEnsure := context.WithTimeout(context.Background(), waitFor)
	defer cancelEnsure()
	if err := events.EnsureStreams(ensureCtx, e.js, e.ns); err != nil { // what a scheduler does at start
		t.Fatal(err)
	}
	outcomes := e.watchDone()
	e.fire("echo", `{}`, "")
	if o := next(t, outcomes); o.typ != events.TypeJobCompleted {
		t.Errorf("outcome %s, want %s", o.typ, events.TypeJobCompleted)
	}
	if n := strings.Count(logs.String(), waiting); n != 1 {
		t.Errorf("the worker said %d times that it waits for the streams; want once:\n%s", n, logs)
	}
}

// Outcomes that finish together are published together, at most OutcomeBatch to a message,
// each once and in its fire's trace; with OutcomeBatch 1, each goes alone.
func TestOutcomesThatFinishTogetherShareAMessage(t *testing.T) {
	const jobs = 40
	for _, perMsg := range []int{8, 1} {
		t.Run(fmt.Sprintf("OutcomeBatch=%d", perMsg), func(t *testing.T) {
			e := newEnv(t)
			started, gate := make(chan struct{}, jobs), make(chan struct{})
			reg := worker.NewRegistry()
			reg.Register("gate", func(ctx context.Context, job worker.Job) error {
				started <- struct{}{}
				<-gate
				return nil
			})
			cfg := e.testConfig("w1")
			cfg.Concurrency, cfg.AckWait, cfg.OutcomeBatch = jobs, 30*time.Second, perMsg
			e.startWorker(e.js, cfg, reg)
			outcomes := e.watchDone()
			fired := map[uuid.UUID]bool{}
			for range jobs {
				fired[e.fire("gate", `{}`, "").FireID] = true
			}
			for range jobs {
				<-started
			}
			close(gate) // every job finishes at once
			for range jobs {
				o := next(t, outcomes)
				if !fired[o.res.FireID] || o.typ != events.TypeJobCompleted {
					t.Fatalf("outcome %s of fire %s: not a completion of a fire still expected", o.typ, o.res.FireID)
				}
				delete(fired, o.res.FireID)
				if tid := strings.Split(testTraceParent, "-")[1]; !strings.Contains(o.traceParent, tid) {
					t.Errorf("completion traceparent %q is not in trace %s", o.traceParent, tid)
				}
			}
			e.waitSettled("gate")
			msgs := e.doneCount()
			switch {
			case msgs*uint64(perMsg) < jobs:
				t.Errorf("%d messages held %d outcomes: more than %d in one", msgs, jobs, perMsg)
			case perMsg > 1 && msgs >= jobs:
				t.Errorf("%d outcomes that finished together went in %d messages: none shared one", jobs, msgs)
			}
			t.Logf("%d outcomes in %d messages", jobs, msgs)
		})
	}
}

// A worker stopped after JetStream stored a batch of its outcomes and before it acked their
// fires (killed between the two) leaves those fires unacknowledged: JetStream delivers them
// again after the ack wait, and another worker runs them again (at-least-once) and publishes
// their outcomes under the same fireIds at attempt 2. The schedulers end an execution once, so
// the second outcomes change nothing (complete's TestConsumerAcksABatchOnceEveryOutcomeIsRecorded,
// TestApply).
func TestFiresOfAStoredButUnackedBatchRunAgain(t *testing.T) {
	const jobs = 6
	e := newEnv(t)
	started, gate := make(chan struct{}, jobs), make(chan struct{})
	regA := worker.NewRegistry()
	regA.Register("work", func(ctx context.Context, job worker.Job) error {
		started <- struct{}{}
		<-gate
		return nil
	})
	ncA, jsA := connect(t, e.url)
	cfg := e.testConfig("worker-a")
	cfg.Concurrency = jobs
	a, err := worker.New(cfg, jsA, regA)
	if err != nil {
		t.Fatal(err)
	}
	// The first job's outcome goes alone; while its store is held here, the other jobs end and
	// queue theirs, which go together in the next message. Once that batch is stored, A "dies".
	firstStored, proceed := make(chan struct{}), make(chan struct{})
	var stores, batch atomic.Int32
	worker.AfterStore(a, func(n int) {
		switch stores.Add(1) {
		case 1:
			close(firstStored)
			<-proceed
		case 2:
			batch.Store(int32(n))
			ncA.Close() // A's process dies: the batch is stored, its fires not acked
		}
	})
	runA := e.run(a, regA)
	outcomes := e.watchDone()
	fired := map[uuid.UUID]bool{}
	for range jobs {
		fired[e.fire("work", `{}`, "").FireID] = true
	}
	for range jobs {
		<-started
	}
	gate <- struct{}{} // one job ends
	<-firstStored
	close(gate) // the others end while its outcome's store is held
	deadline := time.Now().Add(waitFor)
	for worker.QueuedOutcomes(a) < jobs-1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d outcomes queued behind the first", worker.QueuedOutcomes(a), jobs-1)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(proceed)
	if err := runA.wait(t); err == nil || !strings.Contains(err.Error(), "connection closed") {
		t.Fatalf("worker A's Run returned %v; want an error saying its connection closed", err)
	}
	if n := batch.Load(); n != jobs-1 {
		t.Fatalf("worker A stored a batch of %d outcomes before it stopped, want %d", n, jobs-1)
	}

	ranB := e.startCounter("worker-b", "work")
	e.waitSettled("work")

	byA, byB := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for range e.doneOutcomes() {
		o := next(t, outcomes)
		switch {
		case !fired[o.res.FireID] || o.typ != events.TypeJobCompleted:
			t.Fatalf("outcome %s of fire %s: not a completion of a fire published here", o.typ, o.res.FireID)
		case o.res.Worker == "worker-a" && o.res.Attempt == 1 && !byA[o.res.FireID]:
			byA[o.res.FireID] = true
		case o.res.Worker == "worker-b" && o.res.Attempt == 2 && !byB[o.res.FireID]:
			byB[o.res.FireID] = true
		default:
			t.Fatalf("outcome of fire %s by %s at attempt %d: not the first of its worker and attempt",
				o.res.FireID, o.res.Worker, o.res.Attempt)
		}
	}
	again := 0
	for id := range byB {
		if byA[id] {
			again++
		}
	}
	// Every fire's outcome was stored by A; the batch's fires (and the first, if its ack had
	// not left when the connection closed) ran again on B.
	if len(byA) != jobs || again < jobs-1 || len(byB) > jobs || int(ranB.Load()) != len(byB) {
		t.Errorf("A stored %d outcomes, B ran %d jobs and published %d outcomes, %d of fires A had stored; "+
			"want %d by A, the batch's %d again by B", len(byA), ranB.Load(), len(byB), again, jobs, jobs-1)
	}
}

// doneOutcomes is how many outcomes the DONE stream holds for the namespace, its batches counted
// by their outcomes.
func (e *env) doneOutcomes() int {
	e.t.Helper()
	ctx := context.Background()
	msgs := e.doneCount()
	cons, err := e.js.OrderedConsumer(ctx, events.StreamDone(e.ns), jetstream.OrderedConsumerConfig{})
	if err != nil {
		e.t.Fatal(err)
	}
	batch, err := cons.Fetch(int(msgs), jetstream.FetchMaxWait(waitFor))
	if err != nil {
		e.t.Fatal(err)
	}
	n, read := 0, uint64(0)
	for m := range batch.Messages() {
		bodies, err := events.Bodies(m.Headers(), m.Data())
		if err != nil {
			e.t.Fatal(err)
		}
		n += len(bodies)
		read++
	}
	if read != msgs {
		e.t.Fatalf("read %d of the DONE stream's %d messages: %v", read, msgs, batch.Error())
	}
	return n
}
