package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/pending"
	"github.com/agatesched/agate/internal/presence"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/warm"
)

// Config configures a Worker. Zero durations and counts take the defaults documented per field.
// AckWait and MaxDeliver are settings of the durable consumers that all workers of a namespace
// share: each worker writes them when it starts (CreateOrUpdateConsumer), so give every worker
// the same values.
type Config struct {
	// Namespace is the scheduler namespace whose fired jobs this worker runs.
	Namespace string
	// InstanceID names this process in completion events (JobResult.worker, CloudEvents source).
	InstanceID string
	// Concurrency is how many jobs run at once, across all job types. Default 10.
	Concurrency int
	// AckWait is how long JetStream waits for an ack (or a heartbeat) before redelivering a fire
	// to another worker. Messages held by this worker are heartbeated every AckWait/3, so it only
	// bounds how soon a dead worker's jobs are retried. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many times a fire is attempted; the last failed attempt publishes
	// JobFailed{final:true}. Default 5.
	MaxDeliver int
	// DefaultTimeout bounds a job whose JobFired has no timeout. Default 5m.
	DefaultTimeout time.Duration
	// RetryDelay is the delay before the second attempt; it doubles per attempt up to
	// MaxRetryDelay. Defaults 1s and 1m.
	RetryDelay    time.Duration
	MaxRetryDelay time.Duration
	// DrainTimeout is how long Run waits, once its context is cancelled, for running jobs to
	// finish. Jobs still running then are cancelled and left unacked, so JetStream redelivers
	// them. Default 30s.
	DrainTimeout time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider records the worker's metrics. Default: the global provider, a no-op unless
	// the binary installed one.
	MeterProvider metric.MeterProvider
	// PresenceInterval is how often the worker announces itself to the schedulers
	// (internal/presence), for their workers query and web UI. Default 5s.
	PresenceInterval time.Duration
	// OutcomeBatch is the most outcomes published in one message: those that finish while
	// the worker waits for JetStream to store the previous ones go together (docs/contract.md,
	// "Batches of outcomes"). 1: a message per outcome, for readers of the DONE stream that do
	// not read batches. Default OutcomeBatchDefault.
	OutcomeBatch int
}

// fetchWait is how long one pull request waits for messages. It bounds how long a worker keeps
// asking a server that restarted (and forgot the request) before asking again.
const fetchWait = 5 * time.Second

// publishRetryFor is how long a worker keeps retrying a completion publish (while still
// heartbeating the fire) before it gives the fire back with a delayed nak.
const publishRetryFor = 30 * time.Second

// Worker runs the jobs of the registered types. Create it with New, start it with Run.
//
// It uses nats.go's jetstream package directly rather than a Watermill subscriber:
// it needs msg.InProgress() heartbeats for long jobs, the delivery count from the message
// metadata (NumDelivered is the attempt number), NakWithDelay for retry back-off, Term for
// poison messages, and to ack only after the completion's publish was acknowledged. Watermill's
// Message exposes only Ack/Nack, none of these.
type Worker struct {
	cfg      Config
	js       jetstream.JetStream
	reg      *Registry
	subjects events.Subjects
	source   string
	log      *slog.Logger
	tracer   trace.Tracer
	slots    chan struct{} // a token per running job: the Concurrency bound across all types

	outcomes    *outcomes
	reconnected broadcast // fired each time the NATS connection is re-established
	running     executions
	metrics     *metrics
	pulling     pulling    // for readiness: whether the pull loops run
	runners     *warm.Pool // the pull loops' messages and the fires of their batches run on it

	afterStore func(n int) // tests (export_test.go): runs once a message of n outcomes is stored, before their fires are acked
}

// broadcast wakes every waiter each time it fires.
type broadcast struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

// context returns a context that is cancelled at the next broadcast.
func (b *broadcast) context() context.Context {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ctx == nil {
		b.ctx, b.cancel = context.WithCancel(context.Background())
	}
	return b.ctx
}

// fire cancels the contexts handed out so far.
func (b *broadcast) fire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
	}
	b.ctx, b.cancel = nil, nil
}

// New checks cfg, applies its defaults and returns a worker for the types registered in reg.
// The scheduler's all-in-one mode uses it too: NewRegistry, RegisterBuiltins, New, Run.
func New(cfg Config, js jetstream.JetStream, reg *Registry) (*Worker, error) {
	if err := events.ValidateNamespace(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	if cfg.InstanceID == "" {
		return nil, errors.New("worker config: InstanceID is required (it names this worker in completion events)")
	}
	if js == nil {
		return nil, errors.New("worker config: a JetStream context is required")
	}
	if reg == nil || len(reg.Types()) == 0 {
		return nil, errors.New("worker config: no job types registered; register handlers (e.g. RegisterBuiltins) before New")
	}
	if cfg.Concurrency < 0 || cfg.MaxDeliver < 0 || cfg.AckWait < 0 || cfg.DefaultTimeout < 0 ||
		cfg.RetryDelay < 0 || cfg.MaxRetryDelay < 0 || cfg.DrainTimeout < 0 || cfg.OutcomeBatch < 0 {
		return nil, errors.New("worker config: concurrency, max deliver, outcome batch and durations must not be negative")
	}
	cfg.Concurrency = cmp.Or(cfg.Concurrency, 10)
	cfg.AckWait = cmp.Or(cfg.AckWait, 30*time.Second)
	cfg.MaxDeliver = cmp.Or(cfg.MaxDeliver, 5)
	cfg.DefaultTimeout = cmp.Or(cfg.DefaultTimeout, 5*time.Minute)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, time.Second)
	cfg.MaxRetryDelay = max(cmp.Or(cfg.MaxRetryDelay, time.Minute), cfg.RetryDelay)
	cfg.DrainTimeout = cmp.Or(cfg.DrainTimeout, 30*time.Second)
	cfg.PresenceInterval = cmp.Or(cfg.PresenceInterval, presence.IntervalDefault)
	cfg.OutcomeBatch = cmp.Or(cfg.OutcomeBatch, OutcomeBatchDefault)
	if cfg.AckWait < 300*time.Millisecond {
		return nil, fmt.Errorf("worker config: AckWait %s is too short to heartbeat (every AckWait/3); use at least 300ms", cfg.AckWait)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Worker{
		cfg:      cfg,
		js:       js,
		reg:      reg,
		subjects: events.Subjects(cfg.Namespace),
		source:   events.Source(cfg.Namespace, cfg.InstanceID),
		log:      cfg.Logger.With("instance", cfg.InstanceID),
		tracer:   telemetry.Tracer("worker"),
		slots:    make(chan struct{}, cfg.Concurrency),
		metrics:  newMetrics(cfg.MeterProvider, reg.Types()),
	}
	w.outcomes = &outcomes{w: w, max: cfg.OutcomeBatch}
	return w, nil
}

// Run waits for the FIRED and DONE streams (a scheduler creates them; a worker only looks them
// up), creates or updates its durable consumers, then runs jobs until ctx is cancelled. It then
// stops fetching, waits up to DrainTimeout for running jobs (their completions are still
// published and acked), cancels the rest and returns nil. It returns an error when the setup
// fails or the NATS connection is closed under it. Call it once.
func (w *Worker) Run(ctx context.Context) error {
	// The backlog of this worker's job types, for as long as it runs; the schedulers report every
	// type's, including types no worker runs.
	watches := make([]pending.Watch, 0, len(w.reg.Types()))
	for _, typ := range w.reg.Types() {
		watches = append(watches, pending.Watch{Stream: events.StreamFired(w.cfg.Namespace), Name: events.WorkerDurable(typ)})
	}
	unregister, err := pending.Register(w.cfg.MeterProvider, w.js, pending.Config{Watches: watches, Logger: w.log})
	if err != nil {
		return err
	}
	defer unregister()
	unregisterRuns, err := w.metrics.register()
	if err != nil {
		return err
	}
	defer unregisterRuns()
	// Announced while it serves; the last announcement says it stops.
	started := time.Now().UTC()
	announceCtx, stopAnnouncing := context.WithCancel(ctx)
	announced := make(chan struct{})
	go func() {
		defer close(announced)
		presence.Announce(announceCtx, w.js.Conn(), w.cfg.Namespace, w.cfg.PresenceInterval, w.log, func() presence.Worker {
			return presence.Worker{Instance: w.cfg.InstanceID, JobTypes: w.reg.Types(), Concurrency: w.cfg.Concurrency,
				InFlight: len(w.slots), Started: started}
		})
	}()
	defer func() { stopAnnouncing(); <-announced }()
	err = w.serve(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil // cancelled while setting up: a normal stop
	}
	return err
}

func (w *Worker) serve(ctx context.Context) error {
	stream, err := w.awaitStreams(ctx)
	if err != nil {
		return err
	}
	types := w.reg.Types()
	consumers := make(map[string]jetstream.Consumer, len(types))
	for _, typ := range types {
		c, err := w.js.CreateOrUpdateConsumer(ctx, events.StreamFired(w.cfg.Namespace), jetstream.ConsumerConfig{
			Durable:       events.WorkerDurable(typ),
			Description:   "Agate workers running " + typ + " jobs",
			FilterSubject: w.subjects.Fired(typ),
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       w.cfg.AckWait,
			MaxDeliver:    w.cfg.MaxDeliver,
		})
		if err != nil {
			return fmt.Errorf("worker: creating consumer %s on stream %s: %w",
				events.WorkerDurable(typ), events.StreamFired(w.cfg.Namespace), err)
		}
		consumers[typ] = c
	}
	dlSub, dlMsgs, err := w.subscribeDeadLetters()
	if err != nil {
		return err
	}
	intSub, err := w.subscribeInterrupts(ctx)
	if err != nil {
		return fmt.Errorf("worker: subscribing to interrupt requests: %w", err)
	}
	defer func() { _ = intSub.Unsubscribe() }()
	w.log.InfoContext(ctx, "worker started", "namespace", w.cfg.Namespace, "types", types,
		"concurrency", w.cfg.Concurrency)

	// Jobs do not stop when ctx does: they get DrainTimeout to finish, then jobCtx is cancelled.
	jobCtx, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	var inflight sync.WaitGroup
	g, pullCtx := errgroup.WithContext(ctx)
	w.pulling.set(pullCtx)
	w.runners = warm.New(0, runnerIdle)
	defer w.runners.Close()
	// A closed connection never comes back: stop at once rather than when a pending pull expires.
	// After a reconnect the server may have forgotten pending pull requests (it restarted):
	// cut them short so the pull loops ask again at once.
	status := w.js.Conn().StatusChanged(nats.CLOSED, nats.CONNECTED)
	defer w.js.Conn().RemoveStatusListener(status)
	g.Go(func() error {
		for {
			select {
			case s := <-status:
				if s == nats.CLOSED {
					return errors.New("worker: NATS connection closed; running jobs can no longer be acked")
				}
				w.log.InfoContext(pullCtx, "reconnected to NATS; renewing pull requests")
				w.reconnected.fire()
			case <-pullCtx.Done():
				return nil
			}
		}
	})
	g.Go(func() error { return w.deadLetters(pullCtx, stream, dlSub, dlMsgs) })
	for _, typ := range types {
		g.Go(func() error { return w.pull(pullCtx, jobCtx, typ, consumers[typ], &inflight) })
	}
	err = g.Wait()

	drained := make(chan struct{})
	go func() { inflight.Wait(); close(drained) }()
	t := time.NewTimer(w.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-drained:
	case <-t.C:
		w.log.Warn("jobs still running after the drain timeout were cancelled; JetStream will redeliver them",
			"drain_timeout", w.cfg.DrainTimeout)
	}
	w.log.Info("worker stopped")
	return err
}

// pull fetches the fired jobs of one type for as long as ctx lasts. It asks for no more fires
// than it has budget for, the budget being Concurrency held fires per type: a message that sat
// in a client-side prefetch buffer would not be heartbeated and could be redelivered to another
// worker while still queued here. A held fire waits for one of the Concurrency run slots (shared
// across types) under its message's heartbeat. A message may hold a batch of fires: pull asks
// for as many messages as the budget holds of the last one's fires (one at least), and a batch
// larger than the budget left is a debt that the next fetch waits out; so a worker holds at most
// Concurrency fires and one batch more, and leaves the rest to the other workers.
func (w *Worker) pull(ctx, jobCtx context.Context, typ string, cons jetstream.Consumer, inflight *sync.WaitGroup) error {
	budget := newFireBudget(w.cfg.Concurrency)
	errDelay := 100 * time.Millisecond
	perMsg := w.cfg.Concurrency // fires in the last message received; at first, one message is asked for
	for {
		free, ok := budget.acquire(ctx)
		if !ok {
			return nil
		}

		// Cancelling ctx ends the pull at once; a message the server sends after that is not
		// received and comes back after AckWait.
		fctx, cancel := context.WithTimeout(ctx, fetchWait)
		stopOnReconnect := context.AfterFunc(w.reconnected.context(), cancel)
		batch, err := cons.Fetch(max(1, free/perMsg), jetstream.FetchContext(fctx))
		got := 0
		if err == nil {
			for msg := range batch.Messages() {
				d := newDelivery(msg)
				n := d.fires()
				got, perMsg = got+n, n
				inflight.Add(1)
				w.runners.Go(func() {
					w.handle(ctx, jobCtx, typ, d)
					budget.release(n)
					inflight.Done()
				})
			}
			err = batch.Error()
		}
		stopOnReconnect()
		cancel()
		budget.release(free - got) // what the fetch did not bring back, or (negative) a batch's excess

		if ctx.Err() != nil {
			return nil
		}
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			errDelay = 100 * time.Millisecond
			continue
		}
		if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) || w.js.Conn().IsClosed() {
			return fmt.Errorf("worker: fetching %s jobs: NATS connection closed: %w", typ, err)
		}
		w.log.WarnContext(ctx, "fetching jobs failed; retrying", "type", typ, "consumer", events.WorkerDurable(typ),
			"retry_in", errDelay, "error", err)
		select {
		case <-time.After(errDelay):
		case <-ctx.Done():
			return nil
		}
		errDelay = min(2*errDelay, 5*time.Second)
	}
}

// runnerIdle is how long a goroutine that ran a message or a fire of a batch waits for the
// next before it ends.
const runnerIdle = 10 * time.Second

// fireBudget counts the fires one pull loop holds, against at most max: acquire takes what is
// free, and release gives back what a fetch did not use or a settled message held. A batch
// larger than what was free makes held exceed max (a negative release), until its fires end.
type fireBudget struct {
	mu        sync.Mutex
	held, max int
	freed     chan struct{} // signalled when fires were released
}

func newFireBudget(max int) *fireBudget {
	return &fireBudget{max: max, freed: make(chan struct{}, 1)}
}

// acquire waits until some budget is free, takes all of it and returns how much, or false when
// ctx ends first.
func (b *fireBudget) acquire(ctx context.Context) (int, bool) {
	for {
		b.mu.Lock()
		if free := b.max - b.held; free > 0 {
			b.held = b.max
			b.mu.Unlock()
			return free, true
		}
		b.mu.Unlock()
		select {
		case <-b.freed:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// release gives n fires back (takes -n more when n is negative).
func (b *fireBudget) release(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
	select {
	case b.freed <- struct{}{}:
	default:
	}
}

// delivery is a message of fires as pull received it: its fires' envelopes read (events.Bodies),
// or why they cannot be.
type delivery struct {
	msg    jetstream.Msg
	bodies [][]byte
	err    error
}

func newDelivery(msg jetstream.Msg) delivery {
	bodies, err := events.Bodies(msg.Headers(), msg.Data())
	return delivery{msg: msg, bodies: bodies, err: err}
}

// fires is how many fires d holds: one for a message that is not a batch, or not readable.
func (d delivery) fires() int { return max(1, len(d.bodies)) }

// streamsRetry bounds the wait between two looks for the streams.
const streamsRetry = 5 * time.Second

// awaitStreams looks the FIRED and DONE streams of the namespace up until both exist and returns
// FIRED. Workers may not create streams (docs/contract.md, "NATS permissions"): until a scheduler
// node of the namespace has started, the worker says so once in the log and waits. Other errors
// end the wait, except JetStream not answering yet (no responders, a timeout: a cluster still
// electing its leaders), which is waited out the same way.
func (w *Worker) awaitStreams(ctx context.Context) (jetstream.Stream, error) {
	ns := w.cfg.Namespace
	said := map[string]bool{} // what the log said the worker waits for: each once
	for attempt := 1; ; attempt++ {
		name := events.StreamFired(ns)
		fired, err := w.js.Stream(ctx, name)
		if err == nil {
			name = events.StreamDone(ns)
			_, err = w.js.Stream(ctx, name)
		}
		if err == nil {
			if len(said) > 0 {
				w.log.InfoContext(ctx, "the streams of the namespace exist; starting", "namespace", ns)
			}
			return fired, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var msg string
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			msg = "waiting for a scheduler to create the streams of namespace " + ns
		case natsconn.NotAnswering(err):
			msg = "JetStream is not answering yet; waiting for it"
		default:
			return nil, fmt.Errorf("worker: looking up stream %s: %w", name, err)
		}
		if !said[msg] {
			w.log.WarnContext(ctx, msg, "namespace", ns, "stream", name, "error", err)
			said[msg] = true
		}
		t := time.NewTimer(retry.Delay(attempt, 100*time.Millisecond, streamsRetry))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
