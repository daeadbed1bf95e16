// Package node assembles one scheduler node from the lifecycle steps: command consumer, acquire,
// fire, outbox relay, completion consumer and recovery, and the pruning of remembered commands,
// each a Run(ctx) loop under one errgroup.
// cmd/scheduler (and the all-in-one dev mode, and the integration tests) start nodes through it;
// the steps never import each other, the hand-offs are wired here.
package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/api"
	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/fire"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/pending"
	"github.com/agatesched/agate/internal/presence"
	"github.com/agatesched/agate/internal/query"
	"github.com/agatesched/agate/internal/recovery"
	"github.com/agatesched/agate/internal/retention"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/vacuum"
	"github.com/agatesched/agate/internal/wake"
)

// Config configures a scheduler node. Zero values take each step's documented default.
type Config struct {
	Namespace  string
	InstanceID string
	// LockMode is "partitioned" (Partitions rows; the default; see docs/architecture.md) or "global" (one
	// TRIGGER_ACCESS row per namespace, exactly as Quartz). All nodes of a namespace use the same.
	LockMode   string
	Partitions int // lock partitions in partitioned mode; default 8
	// PartitionsAtOnce is how many transactions in different lock partitions each of the
	// node's loops runs at once; default store.AtOnceDefault.
	PartitionsAtOnce int
	Batch            int
	FireAhead        time.Duration
	PollInterval     time.Duration
	MisfireThreshold time.Duration
	CheckinInterval  time.Duration
	SweepInterval    time.Duration
	SweepDelay       time.Duration
	// EventBatch is the most events of the EVENTS stream published in one message
	// (outbox.Config.EventBatch); 1 publishes each alone. Default EventBatchDefault.
	EventBatch int
	// FireBatch is the most JobFired of one transaction and job type published in one message
	// (outbox.Config.FireBatch); 1 publishes each alone. Default FireBatchDefault.
	FireBatch       int
	JobTypes        []string
	MaxCommandBytes int
	// Streams are the replicas and limits of the namespace's JetStream streams, applied at start
	// to streams that exist already too (events.EnsureStreamsWith). Zero fields: the defaults.
	Streams events.StreamSettings
	// IdempotencyWindow is how long a command's outcome (and a rejected body) is remembered;
	// default retention.IdempotencyWindowDefault, at least the streams' max age. PruneInterval
	// is the wait between pruning passes (default: the window / 100, a second to a minute).
	IdempotencyWindow time.Duration
	PruneInterval     time.Duration
	// WorkerMaxDeliver, WorkerJobTimeout and AbandonGrace say when an execution with no outcome
	// is abandoned (recovery.Config); the first two are the workers' --max-deliver and
	// --job-timeout.
	WorkerMaxDeliver int
	WorkerJobTimeout time.Duration
	AbandonGrace     time.Duration
	// HealEvery is how many check-ins apart the healing and abandonment scans run. Default 12.
	HealEvery int
	// EventRetention is how long the event log keeps events (whole days are dropped once a
	// snapshot covers them); default retention.EventRetentionDefault, negative keeps them all.
	EventRetention time.Duration
	// SnapshotInterval is how often the log's projection is snapshotted; default
	// retention.SnapshotIntervalDefault.
	SnapshotInterval time.Duration
	// VacuumInterval is how often the node looks at the fire path's tables and vacuums those
	// with many dead rows (internal/vacuum); default vacuum.IntervalDefault, negative leaves
	// them to autovacuum.
	VacuumInterval time.Duration
	Logger         *slog.Logger
	// Now is the node clock (fire times, misfires); tests inject one. Default time.Now. The node
	// corrects it by its offset from the database clock, measured at each check-in.
	Now func() time.Time
	// KeepClock fires by Now as it is, uncorrected: for tests that simulate another date.
	// Production nodes always fire by the database clock.
	KeepClock bool
	// MeterProvider records the node's metrics (README, "Health and metrics"). Default: the
	// global provider, a no-op unless the binary installed one.
	MeterProvider metric.MeterProvider
	// Health, when set, is filled in as the node starts, for the HTTP listener's /readyz.
	Health *Health
	// API, when set, answers the node's commands and queries in process while it serves them
	// (the web UI, internal/webui).
	API *api.Local
	// TestSignals, when a test set them (and initialised the ones it waits on), tell it what the
	// node's loops did.
	TestSignals *TestSignals
}

// TestSignals are the test signals of a node's loops (see internal/testsignal).
type TestSignals struct {
	Acquire  acquire.TestSignals
	Queue    fire.QueueSignals
	Complete complete.TestSignals
	Recovery recovery.TestSignals
	Outbox   outbox.TestSignals
	Prune    retention.TestSignals
}

// LockModes this version implements.
var LockModes = []string{"global", "partitioned"}

// PartitionsDefault is the default of Config.Partitions in partitioned mode.
const PartitionsDefault = 8

// PartitionsAtOnceDefault is the default of Config.PartitionsAtOnce (store.AtOnceDefault says why).
const PartitionsAtOnceDefault = store.AtOnceDefault

// MaxPartitionsAtOnce bounds Config.PartitionsAtOnce: each transaction holds one of the
// connections that all the node's loops share (store.PoolSizeDefault unless the URL says).
const MaxPartitionsAtOnce = 16

// locks is the lock protocol the configuration asks for.
func (c Config) locks() store.Locks {
	if c.LockMode == "global" {
		return store.Locks{Namespace: c.Namespace}
	}
	return store.Locks{Namespace: c.Namespace, Partitions: cmp.Or(c.Partitions, PartitionsDefault), AtOnce: c.PartitionsAtOnce}
}

// Validate checks a configuration from flags or the environment.
func (c Config) Validate() error {
	if err := events.ValidateNamespace(c.Namespace); err != nil {
		return err
	}
	if c.InstanceID == "" || len(c.InstanceID) > 200 {
		return fmt.Errorf("instance id must be 1-200 characters")
	}
	if c.LockMode != "" && !slices.Contains(LockModes, c.LockMode) {
		return fmt.Errorf("lock mode %q is not supported; use global or partitioned", c.LockMode)
	}
	if c.Partitions < 0 || c.Partitions > store.Slots {
		return fmt.Errorf("partitions must be between 1 and %d", store.Slots)
	}
	if c.PartitionsAtOnce < 0 || c.PartitionsAtOnce > MaxPartitionsAtOnce {
		return fmt.Errorf("partitions at once must be between 1 and %d", MaxPartitionsAtOnce)
	}
	if c.EventBatch < 0 {
		return fmt.Errorf("event batch %d: give at least 1 (1 publishes each event in a message of its own)", c.EventBatch)
	}
	if c.FireBatch < 0 || c.FireBatch > MaxFireBatch {
		return fmt.Errorf("fire batch %d: give 1 to %d (1 publishes each JobFired in a message of its own)", c.FireBatch, MaxFireBatch)
	}
	if c.WorkerMaxDeliver < 0 || c.WorkerJobTimeout < 0 || c.AbandonGrace < 0 || c.HealEvery < 0 {
		return fmt.Errorf("max-deliver, job-timeout and abandon-grace must be positive")
	}
	if err := c.Streams.Validate(); err != nil {
		return err
	}
	// A command still in the COMMANDS stream may be delivered again (a durable consumer made
	// anew delivers the whole stream): its outcome must still be remembered then.
	window := cmp.Or(c.IdempotencyWindow, retention.IdempotencyWindowDefault)
	maxAge := cmp.Or(c.Streams.MaxAge, events.StreamMaxAgeDefault)
	if c.IdempotencyWindow < 0 || window < maxAge {
		return fmt.Errorf("idempotency window %s is shorter than the stream max age %s: a command the COMMANDS "+
			"stream still holds could be applied twice if delivered again; set --idempotency-window to at least "+
			"--stream-max-age", window, maxAge)
	}
	return nil
}

// Run migrates the database, makes sure the streams and lock rows exist, and runs the node until
// ctx is cancelled. It returns the first error that stops a step.
func Run(ctx context.Context, cfg Config, pool *pgxpool.Pool, nc *nats.Conn) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cmp.Or(cfg.Logger, slog.Default()).With(slog.String("node", cfg.InstanceID))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ns := cfg.Namespace
	locks := cfg.locks()
	locks.Wait = lockWaitHistogram(cfg.MeterProvider)
	if err := cfg.Health.attach(pool, nc, ns); err != nil {
		return err
	}
	// A connection lost while starting (the database restarting) is waited out, not fatal.
	err := retry.Do(ctx, log, "preparing the database", store.IsTransient, func() error {
		if err := store.Migrate(ctx, pool); err != nil {
			return err
		}
		if err := retention.EnsurePartitions(ctx, pool); err != nil {
			return err
		}
		if err := locks.Ensure(ctx, pool); err != nil {
			return err
		}
		changed, err := locks.Agree(ctx, pool, cfg.InstanceID)
		if changed {
			log.WarnContext(ctx, "lock settings of the namespace changed (no other node was running)",
				slog.String("lock_mode", locks.Mode()), slog.Int("lock_partitions", locks.Count()))
		}
		return err
	})
	if err != nil {
		return stopping(ctx, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	// NATS unreachable, or a cluster short of servers for the replicas, may pass; settings
	// JetStream refuses stop the node with the error saying what to change.
	settingsOK := func(err error) bool { var se *events.SettingsError; return !errors.As(err, &se) }
	if err := retry.Do(ctx, log, "creating the JetStream streams", settingsOK, func() error {
		return events.EnsureStreamsWith(ctx, js, ns, cfg.Streams, log)
	}); err != nil {
		return stopping(ctx, err)
	}

	// One wake signal, made before the steps: every step that changes triggers notifies it, and
	// the acquire loop waits on it.
	wakeup := wake.New()
	// Every step reads the node clock corrected by its offset from the database clock, which
	// recovery measures at each check-in.
	var clock *store.Clock // nil: Now as it is
	if !cfg.KeepClock {
		clock = store.NewClock(cfg.Now)
		cfg.Now = clock.Now
	}
	member := &store.Member{} // set by recovery when the node joins; acquire and fire read it
	cfg.Health.joining(member)
	ob := outbox.New(outbox.Config{Namespace: ns, InstanceID: cfg.InstanceID, SweepInterval: cfg.SweepInterval, SweepDelay: cfg.SweepDelay,
		EventBatch: cfg.EventBatch, FireBatch: cfg.FireBatch, Logger: log}, pool, js)
	firer := fire.New(fire.Config{Namespace: ns, InstanceID: cfg.InstanceID, Logger: log, Now: cfg.Now})
	queue := fire.NewQueue(fire.QueueConfig{Namespace: ns, InstanceID: cfg.InstanceID, Locks: locks, MaxBatch: cfg.Batch,
		Logger: log, Now: cfg.Now, Wake: wakeup, Member: member}, ob, firer)
	acq := acquire.New(acquire.Config{Namespace: ns, InstanceID: cfg.InstanceID, Locks: locks, Batch: cfg.Batch,
		FireAhead: cfg.FireAhead, PollInterval: cfg.PollInterval, MisfireThreshold: cfg.MisfireThreshold,
		Logger: log, Now: cfg.Now, Wake: wakeup, Member: member, Clock: clock}, pool, ob, firer, queue)
	commands, err := command.New(command.Config{Namespace: ns, InstanceID: cfg.InstanceID, Locks: locks, JobTypes: cfg.JobTypes,
		MaxBodyBytes: cfg.MaxCommandBytes, MisfireThreshold: cfg.MisfireThreshold, Logger: log, Now: cfg.Now, Wake: wakeup}, pool, ob)
	if err != nil {
		return err
	}
	roster, err := presence.Watch(nc, ns)
	if err != nil {
		return fmt.Errorf("listening for the workers' announcements: %w", err)
	}
	defer roster.Stop()
	queries, err := query.New(query.Config{Namespace: ns, Logger: log, JetStream: js, Roster: roster, Now: cfg.Now}, pool)
	if err != nil {
		return err
	}
	waiting := pending.NewWaiting(js, ns, log)
	// A batch of fires or more waits for a worker. JetStream counts messages, which hold up to
	// FireBatch fires each (docs/contract.md, "Batches of fires"): read as full ones.
	fireBatch := cmp.Or(cfg.FireBatch, FireBatchDefault)
	firesWaiting := func() bool { return waiting.AtLeast(ctx, max(1, complete.BatchDefault/fireBatch)) }
	completions := complete.New(complete.Config{Namespace: ns, InstanceID: cfg.InstanceID, Locks: locks, Logger: log,
		Wake: wakeup, Backlogged: acq.Backlogged, Heavy: acq.Heavy, FiresWaiting: firesWaiting}, ob, js)
	vacuumer := vacuum.New(vacuum.Config{Interval: cfg.VacuumInterval, Logger: log,
		Busy: func() bool { return acq.Backlogged() || firesWaiting() }}, pool)
	recoverer := recovery.New(recovery.Config{Namespace: ns, InstanceID: cfg.InstanceID, Locks: locks,
		CheckinInterval: cfg.CheckinInterval, MisfireThreshold: cfg.MisfireThreshold, Logger: log, Now: cfg.Now,
		Wake: wakeup, Member: member, Clock: clock, JetStream: js, HealEvery: cfg.HealEvery,
		WorkerMaxDeliver: cfg.WorkerMaxDeliver, WorkerJobTimeout: cfg.WorkerJobTimeout, AbandonGrace: cfg.AbandonGrace}, pool, ob)

	upkeep := retention.NewEvents(retention.EventsConfig{Namespace: ns, Retention: cmp.Or(cfg.EventRetention, retention.EventRetentionDefault),
		SnapshotInterval: cmp.Or(cfg.SnapshotInterval, retention.SnapshotIntervalDefault), Logger: log}, pool)
	pruner := retention.NewPruner(retention.Config{Namespace: ns, Window: cfg.IdempotencyWindow,
		Interval: cfg.PruneInterval, Logger: log}, pool)

	if ts := cfg.TestSignals; ts != nil {
		acq.TestSignals, queue.TestSignals, completions.TestSignals = ts.Acquire, ts.Queue, ts.Complete
		recoverer.TestSignals, ob.TestSignals, pruner.TestSignals = ts.Recovery, ts.Outbox, ts.Prune
	}
	instrument(cfg.MeterProvider, firer, acq, commands, completions, recoverer)
	// The backlogs of the job outcomes and of every job type's fires, the latter whether or not a
	// worker runs that type: the one place a type without workers shows.
	unregister, err := pending.Register(cfg.MeterProvider, js, pending.Config{Logger: log, Watches: []pending.Watch{
		{Stream: events.StreamDone(ns), Name: complete.DurableName},
		{Stream: events.StreamFired(ns), Name: events.WorkerDurablePrefix, Prefix: true},
	}})
	if err != nil {
		return err
	}
	defer unregister()
	unregisterLag, err := ob.RegisterMetrics(cfg.MeterProvider)
	if err != nil {
		return err
	}
	defer unregisterLag()
	if err := recoverer.Join(ctx); err != nil {
		return stopping(ctx, err)
	}
	log.InfoContext(ctx, "scheduler node started", slog.String("namespace", ns),
		slog.String("lock_mode", cmp.Or(cfg.LockMode, "partitioned")), slog.Int("lock_partitions", locks.Count()))
	g, ctx := errgroup.WithContext(ctx)
	cfg.Health.started(ctx)
	run := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			if err := f(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}
	run("recovery", recoverer.Run)
	run("idempotency pruning", pruner.Run)
	run("acquire", acq.Run)
	run("fire queue", queue.Run)
	run("outbox", ob.Run)
	run("completion consumer", completions.Run)
	run("event log upkeep", upkeep.Run)
	if cfg.VacuumInterval >= 0 {
		run("vacuum", vacuumer.Run)
	}
	run("command consumer", func(ctx context.Context) error { return commands.Run(ctx, js) })
	run("api service", func(ctx context.Context) error { return api.Serve(ctx, nc, apiConfig(cfg, log, commands, queries)) })
	err = g.Wait()
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if lerr := recoverer.Leave(leaveCtx); lerr != nil {
		log.Warn("leaving the cluster failed; other nodes will recover this node's claims", slog.Any("error", lerr))
	}
	log.Info("scheduler node stopped")
	return err
}

// apiConfig makes every command and every query an endpoint of the node's NATS service; a
// request on any other name is a command the scheduler does not know, answered and recorded as
// such by the command step.
func apiConfig(cfg Config, log *slog.Logger, commands *command.Handler, queries *query.Handler) api.Config {
	c := api.Config{Namespace: cfg.Namespace, InstanceID: cfg.InstanceID, Logger: log, Local: cfg.API, Serving: cfg.Health.serving,
		Unknown: func(ctx context.Context, name string, body []byte) (any, *apierr.Error) {
			out := commands.Handle(ctx, name, body)
			return out, out.Error
		}}
	for _, name := range command.Names() {
		c.Endpoints = append(c.Endpoints, api.Endpoint{Name: name, Kind: "command", Concurrent: true,
			Handle: func(ctx context.Context, body []byte) (any, *apierr.Error) {
				out := commands.Apply(ctx, name, body)
				return out, out.Error
			}})
	}
	for _, name := range query.Names() {
		c.Endpoints = append(c.Endpoints, api.Endpoint{Name: name, Kind: "query",
			Handle: func(ctx context.Context, body []byte) (any, *apierr.Error) {
				r := queries.Handle(ctx, name, body)
				return r, r.Error
			}})
	}
	return c
}

// stopping is err, or nil when ctx ended: a node stopped while it was starting did not fail.
func stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
