package recovery

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/retry"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/testsignal"
	"github.com/agatesched/agate/internal/wake"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	CheckinIntervalDefault  = 5 * time.Second
	MisfireThresholdDefault = time.Minute
	misfireBatch            = 500
)

// Config configures a Recoverer.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned); recovery takes every partition.
	Locks store.Locks
	// CheckinInterval is how often this node checks in and scans. Default 5s.
	CheckinInterval time.Duration
	// MisfireThreshold is how late a trigger may be before its misfire instruction applies
	// (Quartz's misfireThreshold). Default 1m.
	MisfireThreshold time.Duration
	Logger           *slog.Logger
	// Now is the node clock used for misfire decisions; tests inject one.
	Now func() time.Time
	// Wake is notified after triggers were released or rescheduled.
	Wake *wake.Signal
	// HealEvery: every how many passes the healing scan runs (see heal). Default 12, a minute at
	// the default check-in interval.
	HealEvery int
	// Clock is measured against the database clock at each check-in (Now should be its Now).
	Clock *store.Clock
	// Member is set to this node's epoch once it has joined, and to 0 when it finds it was
	// declared failed, so that acquire and the fire queue stop at once.
	Member *store.Member
	// JetStream lets the scan for executions that can no longer finish (abandon) check that a
	// fire was handed to a worker; without it that scan does not run.
	JetStream jetstream.JetStream
	// WorkerMaxDeliver, WorkerJobTimeout and AbandonGrace say when an execution with no outcome
	// is abandoned: WorkerMaxDeliver attempts of the job's timeout (WorkerJobTimeout when it has
	// none) plus AbandonGrace after its fire. The first two should be the workers' --max-deliver
	// and --job-timeout. Defaults 5, 5m and 10m.
	WorkerMaxDeliver int
	WorkerJobTimeout time.Duration
	AbandonGrace     time.Duration
}

// Recoverer runs check-in, failed-node recovery and the misfire scan.
type Recoverer struct {
	cfg    Config
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
	origin events.Origin
	epoch  int64 // of this node's membership row; 0 until it joins and after it is fenced
	// beating is the epoch the heartbeat checks in under (0: none), shared with it.
	beating   atomic.Int64
	firstDone bool // this membership's first pass (which gives back an earlier run's claims) is done
	passes    int
	clockNote string // what was last logged about the clock, to log changes only
	metrics   metrics

	TestSignals TestSignals
}

// TestSignals tell tests what the recoverer did.
type TestSignals struct {
	Pass testsignal.Signal[Result] // a pass ended (its result)
	// Vouched: the heartbeat checked in, vouching for the node's events below this xid.
	Vouched testsignal.Signal[uint64]
}

// New builds a Recoverer.
func New(cfg Config, pool *pgxpool.Pool, ob *outbox.Outbox) *Recoverer {
	cfg.CheckinInterval = cmp.Or(cfg.CheckinInterval, CheckinIntervalDefault)
	cfg.MisfireThreshold = cmp.Or(cfg.MisfireThreshold, MisfireThresholdDefault)
	cfg.HealEvery = cmp.Or(cfg.HealEvery, 12)
	cfg.WorkerMaxDeliver = cmp.Or(cfg.WorkerMaxDeliver, WorkerMaxDeliverDefault)
	cfg.WorkerJobTimeout = cmp.Or(cfg.WorkerJobTimeout, WorkerJobTimeoutDefault)
	cfg.AbandonGrace = cmp.Or(cfg.AbandonGrace, AbandonGraceDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Recoverer{cfg: cfg, pool: pool, outbox: ob, origin: events.Origin{Namespace: cfg.Namespace, InstanceID: cfg.InstanceID},
		metrics: newMetrics(nil)}
}

// Join enters the cluster: the node's first check-in, the recovery of failed nodes, and the
// return of claims left by an earlier run with this instance id. A node starts acquiring only
// after Join, so that this recovery never gives back a claim the same run has just made. While
// the database cannot be reached, or a lock partition stays held (by a node stopped in the
// middle of a transaction), Join says so once and waits.
func (r *Recoverer) Join(ctx context.Context) error {
	retryable := func(err error) bool { return store.IsTransient(err) || errors.Is(err, store.ErrPartitionsHeld) }
	return retry.Do(ctx, r.cfg.Logger, "joining the cluster", retryable, func() error {
		_, err := r.RunOnce(ctx)
		return err
	})
}

// Run checks in and scans every CheckinInterval until ctx is cancelled.
//
// Besides the check-in at the start of each pass, a heartbeat checks in on its own every
// CheckinInterval: a pass may wait long for locks (behind a node paused inside a transaction,
// or a restarting database), and a live node waiting for a lock must not look dead to the
// others. The pass alone handles finding itself fenced and rejoining.
func (r *Recoverer) Run(ctx context.Context) error {
	beat := make(chan struct{})
	go func() { defer close(beat); r.heartbeat(ctx) }()
	defer func() { <-beat }()
	t := time.NewTicker(r.cfg.CheckinInterval)
	defer t.Stop()
	var heldSince time.Time // the passes have found a lock partition held since
	warned := false
	for {
		res, err := r.RunOnce(ctx)
		next := t.C
		switch {
		case errors.Is(err, store.ErrPartitionsHeld):
			// Held by a failed node stopped in a transaction, most likely: its claims are
			// released once it goes on (or its connection dies). Try again soon, not a
			// check-in interval later.
			if heldSince.IsZero() {
				heldSince = time.Now()
			}
			if held := time.Since(heldSince); held >= store.HeldWarnAfter && !warned {
				warned = true
				r.cfg.Logger.WarnContext(ctx, "recovering failed nodes waits for a lock partition another transaction holds (a failed node stopped in the middle of one?); retrying",
					slog.Duration("held_for", held.Round(time.Millisecond)), slog.Any("error", err))
			}
			next = time.After(store.HeldWait)
		case err != nil && ctx.Err() == nil:
			heldSince, warned = time.Time{}, false
			r.cfg.Logger.WarnContext(ctx, "recovery pass failed; retrying", slog.Any("error", err))
		default:
			heldSince, warned = time.Time{}, false
		}
		r.TestSignals.Pass.Signal(res)
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// VouchEvery is how often a node whose events JetStream stored since its last check-in checks
// in again, before its regular CheckinInterval: a check-in vouches for them
// (outbox.PublishedBelow), and the sweep publishes again, after its delay (3 s by default),
// the events nobody vouched for. Checking in only every CheckinInterval (5 s) made the sweep
// publish every event a second time.
const VouchEvery = time.Second

// heartbeat checks in every CheckinInterval under the epoch the last pass joined with, and every
// VouchEvery while the node publishes events, until ctx ends. A check-in that finds no row (the
// node was declared failed) changes nothing here.
func (r *Recoverer) heartbeat(ctx context.Context) {
	tick := min(r.cfg.CheckinInterval, VouchEvery)
	t := time.NewTicker(tick)
	defer t.Stop()
	var last time.Time
	var vouched uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		epoch := r.beating.Load()
		if epoch == 0 {
			continue
		}
		if below := r.outbox.PublishedBelow(); below == vouched && time.Since(last) < r.cfg.CheckinInterval-tick/2 {
			continue
		}
		bctx, cancel := context.WithTimeout(ctx, r.cfg.CheckinInterval)
		below, err := r.checkIn(bctx, epoch)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.DebugContext(ctx, "heartbeat check-in failed", slog.Any("error", err))
			continue
		}
		last, vouched = time.Now(), below
		r.TestSignals.Vouched.Signal(below)
	}
}

// checkIn records that this node is alive under epoch, and what it has published (see
// outbox.PublishedBelow), which it returns; errNotMember when the node's membership is gone.
func (r *Recoverer) checkIn(ctx context.Context, epoch int64) (below uint64, err error) {
	var xid, cursor uint64
	below = r.outbox.PublishedBelow()
	err = r.pool.QueryRow(ctx, queries.Get("CheckIn"), r.cfg.Namespace, r.cfg.InstanceID,
		r.cfg.CheckinInterval.Milliseconds(), epoch, strconv.FormatUint(below, 10)).Scan(&xid, &cursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return below, errNotMember
	}
	if err != nil {
		return below, err
	}
	r.outbox.Seen(xid, cursor)
	return below, nil
}

// errNotMember: the node's membership row is gone (declared failed) or has another epoch.
var errNotMember = errors.New("this node is no longer a member of the cluster")

// Result says what one pass did.
type Result struct {
	Fenced      bool          // the node found it had been declared failed, and rejoined
	FailedNodes []string      // nodes found failed and recovered
	Released    int           // triggers released: claims of failed nodes, and this node's leftovers
	Misfired    int           // misfired triggers handled
	Repairs     []Repair      // stuck triggers repaired (a pass every HealEvery)
	Abandoned   []Abandonment // executions that could no longer finish (a pass every HealEvery)
	ClockOffset time.Duration // this node's clock offset from the database's (database − node)
}

// RunOnce checks in, recovers failed nodes and handles misfires. A node not yet a member joins
// under a new epoch, and its first pass gives back claims left by an earlier run with its
// instance id. A node whose check-in finds its membership gone was declared failed (a pause or
// a cut-off longer than the grace): it stops claiming at once, and rejoins.
func (r *Recoverer) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	res.ClockOffset = r.measureClock(ctx)
	if r.epoch != 0 {
		_, err := r.checkIn(ctx, r.epoch)
		if err != nil && !errors.Is(err, errNotMember) {
			return res, fmt.Errorf("checking in: %w", err)
		}
		if err != nil {
			r.cfg.Member.Set(0)
			r.cfg.Logger.ErrorContext(ctx, "this node was declared failed by the cluster (it did not check in in time: "+
				"paused, overloaded or cut off from the database); it stopped claiming, and rejoins under a new epoch",
				slog.Int64("old_epoch", r.epoch))
			r.epoch, r.firstDone, res.Fenced = 0, false, true
			r.beating.Store(0)
			r.metrics.fenced.Add(ctx, 1)
		}
	}
	if r.epoch == 0 {
		err := store.InTx(ctx, r.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, queries.Get("LockMembership"), r.cfg.Namespace, r.cfg.InstanceID); err != nil {
				return err
			}
			return tx.QueryRow(ctx, queries.Get("Join"), r.cfg.Namespace, r.cfg.InstanceID,
				r.cfg.CheckinInterval.Milliseconds()).Scan(&r.epoch)
		})
		if err != nil {
			r.epoch = 0
			return res, fmt.Errorf("joining the cluster: %w", err)
		}
		// The heartbeat keeps the new membership alive from now on, even while this pass waits
		// for locks; claiming starts only once the pass is done (Member below).
		r.beating.Store(r.epoch)
	}
	failed, released, err := r.recoverFailed(ctx)
	if err != nil {
		return res, fmt.Errorf("recovering failed nodes: %w", err)
	}
	res.FailedNodes, res.Released = failed, released
	r.metrics.recovered(ctx, failed, released)
	r.firstDone = true
	r.cfg.Member.Set(r.epoch)
	r.beating.Store(r.epoch)
	misfired, err := r.handleMisfires(ctx)
	res.Misfired = misfired
	if err == nil && r.passes%r.cfg.HealEvery == 0 {
		res.Abandoned, err = r.abandon(ctx)
		r.metrics.abandonedExecutions(ctx, res.Abandoned)
		if err == nil {
			if res.Repairs, err = r.heal(ctx); err == nil {
				r.metrics.repaired(ctx, res.Repairs)
			}
		}
	}
	r.passes++
	if res.Released > 0 || misfired > 0 || len(res.Repairs) > 0 || len(res.Abandoned) > 0 {
		r.cfg.Wake.Notify()
	}
	return res, err
}

// measureClock measures this node's clock against the database's and says so when what it
// finds changes: a node whose offset cannot be measured, or jumps, claims nothing meanwhile.
func (r *Recoverer) measureClock(ctx context.Context) time.Duration {
	if r.cfg.Clock == nil {
		return 0
	}
	m, err := r.cfg.Clock.Measure(ctx, r.pool)
	note, level, msg := "", slog.LevelInfo, ""
	switch {
	case err != nil:
		note, level, msg = "unmeasured", slog.LevelWarn, "cannot measure this node's clock against the database's; not claiming until it can"
	case m.Jumped:
		note, level, msg = "jumped", slog.LevelWarn, "this node's clock jumped; not claiming until the next check-in confirms the new offset"
	case m.Offset > store.ClockWarnOffset || m.Offset < -store.ClockWarnOffset:
		note, msg = "off "+m.Offset.Round(100*time.Millisecond).String(), "this node's clock is off the database's; fire times follow the database clock"
	case r.clockNote != "":
		note, msg = "", "this node's clock agrees with the database's again"
	}
	if note != r.clockNote {
		r.clockNote = note
		attrs := []any{slog.Duration("offset", m.Offset.Round(time.Millisecond)), slog.Duration("uncertainty", m.Uncertainty.Round(time.Millisecond))}
		if err != nil {
			attrs = append(attrs, slog.Any("error", err))
		}
		r.cfg.Logger.Log(ctx, level, msg, attrs...)
	}
	return m.Offset
}

// recoverFailed releases the claims of failed nodes (and, on the first pass, this instance's
// leftovers) and forgets the failed nodes.
func (r *Recoverer) recoverFailed(ctx context.Context) (failed []string, released int, err error) {
	ns := r.cfg.Namespace
	err = r.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		if err := store.WithLock(ctx, tx, ns, store.LockStateAccess); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, queries.Get("FailedNodes"), ns, r.cfg.InstanceID)
		if err != nil {
			return fmt.Errorf("finding failed nodes: %w", err)
		}
		if failed, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("finding failed nodes: %w", err)
		}
		owners := failed
		if !r.firstDone {
			owners = append(slices.Clone(failed), r.cfg.InstanceID)
		}
		if len(failed) == 0 && r.firstDone {
			return nil
		}
		// A failed node may be stopped in the middle of a transaction, holding a partition
		// until it goes on. Waiting for it here held STATE_ACCESS and every partition below
		// it, so every node's fires in those waited too; the pass gives up instead and is
		// tried again soon (Run).
		if err := r.cfg.Locks.AllWithin(ctx, tx, store.HeldWait); err != nil {
			return err
		}
		keys, err := store.ReleaseClaims(ctx, tx, ns, nil, owners)
		if err != nil {
			return err
		}
		reason, extra := events.ReleaseNodeFailed, map[string]any{"nodes": failed}
		if len(failed) == 0 {
			reason, extra = events.ReleaseEarlierRun, nil
		}
		evs, err := r.origin.Released(keys, reason, r.cfg.Now(), extra)
		if err != nil {
			return err
		}
		tx.Append(evs...)
		if _, err := tx.Exec(ctx, queries.Get("ForgetNodes"), ns, failed, r.cfg.InstanceID); err != nil {
			return fmt.Errorf("removing failed nodes: %w", err)
		}
		released = len(keys)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	switch {
	case len(failed) > 0:
		r.cfg.Logger.InfoContext(ctx, "recovered failed scheduler nodes", slog.Any("nodes", failed),
			slog.Int("released_triggers", released))
	case released > 0:
		r.cfg.Logger.InfoContext(ctx, "gave back claims left by an earlier run of this node", slog.Int("released_triggers", released))
	}
	return failed, released, nil
}

func (r *Recoverer) handleMisfires(ctx context.Context) (int, error) {
	total := 0
	for p := range r.cfg.Locks.Count() {
		for {
			n, err := r.misfiresIn(ctx, p)
			total += n
			if err != nil {
				return total, fmt.Errorf("handling misfires: %w", err)
			}
			if n < misfireBatch {
				break
			}
		}
	}
	if total > 0 {
		r.cfg.Logger.InfoContext(ctx, "handled misfired triggers", slog.Int("triggers", total))
	}
	return total, nil
}

// misfiresIn handles one batch of misfired triggers of lock partition p, under that partition
// only, so acquirers of the other partitions go on. A partition another node holds is left for
// the next pass.
func (r *Recoverer) misfiresIn(ctx context.Context, p int) (int, error) {
	ns := r.cfg.Namespace
	handled := 0
	err := r.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		handled = 0
		if got, err := r.cfg.Locks.TryPartition(ctx, tx, p); err != nil || !got {
			return err
		}
		now := r.cfg.Now()
		rows, err := tx.Query(ctx, queries.Get("SelectMisfired"), ns, now.Add(-r.cfg.MisfireThreshold), misfireBatch,
			r.cfg.Locks.Count(), p)
		if err != nil {
			return fmt.Errorf("selecting misfired triggers: %w", err)
		}
		ms, err := pgx.CollectRows(rows, store.ScanTriggerTimes)
		if err != nil {
			return fmt.Errorf("selecting misfired triggers: %w", err)
		}
		names := make([]string, len(ms))
		for i, m := range ms {
			names[i] = m.Calendar
		}
		cals, err := store.LoadCalendars(ctx, tx, ns, names)
		if err != nil {
			return err
		}
		applied := map[string]int64{} // by instruction
		for _, m := range ms {
			evs, done, err := store.ApplyMisfire(ctx, tx, r.origin, m, cals, now, store.StateWaiting)
			if err != nil {
				return err
			}
			if done.Broken != nil {
				r.cfg.Logger.ErrorContext(ctx, "trigger put in ERROR: its next fire time cannot be computed",
					slog.String("trigger", m.Key.String()), slog.String("reason", done.Broken.Error()))
			} else if done.State != "" {
				applied[done.Instruction]++
			}
			tx.Append(evs...)
		}
		handled = len(ms)
		if len(applied) > 0 {
			tx.OnCommit(func() { r.metrics.misfired(ctx, applied) })
		}
		return nil
	})
	return handled, err
}

// Leave is a graceful exit from the cluster: this node's claims not yet fired go back to WAITING
// at once (instead of after failure detection) and its membership row is removed. Call it after
// the node's loops have stopped.
func (r *Recoverer) Leave(ctx context.Context) error {
	ns := r.cfg.Namespace
	released := 0
	err := r.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		if err := r.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		keys, err := store.ReleaseClaims(ctx, tx, ns, nil, []string{r.cfg.InstanceID})
		if err != nil {
			return err
		}
		evs, err := r.origin.Released(keys, events.ReleaseNodeStopping, r.cfg.Now(), nil)
		if err != nil {
			return err
		}
		tx.Append(evs...)
		if _, err := tx.Exec(ctx, queries.Get("Leave"), ns, r.cfg.InstanceID); err != nil {
			return fmt.Errorf("leaving the cluster: %w", err)
		}
		released = len(keys)
		return nil
	})
	if err != nil {
		return err
	}
	r.cfg.Logger.InfoContext(ctx, "left the cluster", slog.Int("released_claims", released))
	return nil
}
