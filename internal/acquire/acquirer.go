package acquire

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/testsignal"
	"github.com/agatesched/agate/internal/wake"
)

//go:embed queries.sql
var queriesSQL string

var queries = store.ParseQueries(queriesSQL)

// Defaults of Config.
const (
	BatchDefault            = 500
	FireAheadDefault        = 200 * time.Millisecond
	PollIntervalDefault     = time.Second
	MisfireThresholdDefault = time.Minute
	HeavyLockWaitDefault    = 100 * time.Millisecond
)

// Config configures an Acquirer.
type Config struct {
	Namespace  string
	InstanceID string
	// Locks is the lock protocol (global or partitioned).
	Locks store.Locks
	// Batch is the most triggers one acquire transaction claims (Quartz's
	// batchTriggerAcquisitionMaxCount). Default 500.
	Batch int
	// FireAhead is how far ahead of their fire time triggers are claimed (Quartz's
	// batchTriggerAcquisitionFireAheadTimeWindow). Default 200ms.
	FireAhead time.Duration
	// PollInterval is the longest the loop sleeps when nothing wakes it. Default 1s.
	PollInterval time.Duration
	// MisfireThreshold: triggers later than this are left to the misfire scan. Default 1m.
	MisfireThreshold time.Duration
	// HeavyLockWait is the longest a heavy flow's pass waits for a partition that another
	// transaction holds (see RunOnce). Default 100ms: another node's pass takes 5–15 ms; one
	// that holds a partition longer (its node stopped in the middle of it) is skipped.
	HeavyLockWait time.Duration
	Logger        *slog.Logger
	// Now is the node clock; tests inject one.
	Now func() time.Time
	// Wake makes the loop acquire at once instead of at its next planned pass: the steps that
	// change triggers notify it. The loop tells it when its next pass is planned (Planned), so
	// that NotifyDue wakes it only for triggers due before then.
	Wake *wake.Signal
	// Member is the node's membership: no pass runs while the node is out of the cluster, and
	// every claim records its epoch.
	Member *store.Member
	// Clock is the node's clock against the database's: no pass runs while its offset is unknown
	// or just jumped. Now should be its Now.
	Clock *store.Clock
}

// Firer fires claims that are already due inside the acquire transaction (fire.Firer).
type Firer interface {
	Fire(ctx context.Context, tx *outbox.Tx, claims []store.Claim) (int, error)
}

// Queue takes claims made ahead of their fire time and fires each when due (fire.Queue).
type Queue interface {
	Add(claims []store.Claim)
}

// Acquirer runs the acquire loop.
type Acquirer struct {
	cfg    Config
	pool   *pgxpool.Pool
	outbox *outbox.Outbox
	firer  Firer
	queue  Queue
	next   int // the partition the next pass starts with, so passes spread over partitions
	busy   busyBackoff
	// directUntil[p]: partition p's flow is heavy; until then its passes claim nothing ahead
	// (runPartitions). Each of a pass's goroutines touches its own partition's entry only.
	directUntil []time.Time
	// light: the last pass claimed little; direct: it found a heavy flow. Either way the next
	// takes every partition in one transaction, unless it left a backlog.
	light, direct bool
	// backlog: the last pass claimed a full batch in some partition (Backlogged).
	backlog atomic.Bool
	// heavyUntil: some partition was found in a heavy flow less than 2 × directFor before it
	// (Heavy), in Unix nanoseconds; flowing: the last pass claimed triggers, or found partitions
	// held.
	heavyUntil atomic.Int64
	flowing    atomic.Bool
	// backlogUntil: a pass claimed a full batch in some partition less than directFor before it;
	// until then a heavy flow's passes skip held partitions rather than wait for them (RunOnce).
	backlogUntil time.Time

	metrics metrics

	TestSignals TestSignals
}

// TestSignals tell tests what the loop did.
type TestSignals struct {
	Pass testsignal.Signal[Result] // a pass ended (its result)
}

// New builds an Acquirer that hands due claims to firer and later ones to queue.
func New(cfg Config, pool *pgxpool.Pool, ob *outbox.Outbox, firer Firer, queue Queue) *Acquirer {
	cfg.Batch = cmp.Or(cfg.Batch, BatchDefault)
	cfg.FireAhead = cmp.Or(cfg.FireAhead, FireAheadDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.MisfireThreshold = cmp.Or(cfg.MisfireThreshold, MisfireThresholdDefault)
	cfg.HeavyLockWait = cmp.Or(cfg.HeavyLockWait, HeavyLockWaitDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Acquirer{cfg: cfg, pool: pool, outbox: ob, firer: firer, queue: queue, metrics: newMetrics(nil)}
}

// Run acquires until ctx is cancelled.
func (a *Acquirer) Run(ctx context.Context) error {
	for {
		res, err := a.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		a.TestSignals.Pass.Signal(res)
		wait := a.cfg.PollInterval
		now := a.cfg.Now()
		// Triggers may be due in partitions other transactions held; or, every partition being
		// held, nothing was read and nothing says when triggers are due.
		heldDue := err == nil && res.Busy > 0 && (res.NextWaiting.IsZero() || !res.NextWaiting.After(now))
		if !heldDue {
			a.busy.reset()
		}
		switch {
		case err != nil:
			a.cfg.Logger.WarnContext(ctx, "acquire failed; retrying", slog.Any("error", err))
		case res.Full:
			continue // more may be due right now
		case heldDue:
			// Look again soon, backing off while it lasts, rather than after PollInterval (a
			// completion batch takes the partitions of all its jobs: a burst's fires waited a
			// second behind each) or at once (a loop of empty transactions).
			wait = min(wait, a.busy.next(res.Claimed))
		case !res.NextWaiting.IsZero() && res.Direct:
			// A partition fires its heavy flow when due rather than ahead: look again when the
			// next trigger is due, but at most every directWait, which batches the flow.
			wait = min(wait, max(directWait, res.NextWaiting.Sub(now)))
		case !res.NextWaiting.IsZero():
			// Sleep until the earliest waiting trigger enters the fire-ahead window, but at least
			// a quarter of the window: what comes due meanwhile is still claimed ahead of its
			// time, and a steady flow of triggers is claimed in slices of 50 ms, not in a
			// transaction per partition per trigger.
			wait = min(wait, max(a.cfg.FireAhead/4, res.NextWaiting.Sub(now)-a.cfg.FireAhead))
		}
		// A command wakes the loop only for a trigger due before this planned pass (the pass at
		// now+wait claims every trigger due up to FireAhead after it); one scheduled while this
		// pass ran is planned for here.
		if due := a.cfg.Wake.Planned(now.Add(wait)); !due.IsZero() {
			wait = min(wait, max(0, due.Sub(now)-a.cfg.FireAhead))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-a.cfg.Wake.C():
		case <-t.C:
		}
		t.Stop()
		a.cfg.Wake.Planned(time.Time{})
	}
}

// Backlogged reports whether the loop's last pass claimed a full batch in some partition: more
// triggers are due than a pass fires, and the loop passes again at once. The completion consumer
// yields to the fire path meanwhile (complete.Config.Backlogged).
func (a *Acquirer) Backlogged() bool { return a.backlog.Load() }

// Heavy reports whether the loop fires a heavy flow: some partition was found in a heavy flow
// within the last 2 × directFor (a partition leaves it every directFor, for a pass that looks
// at its whole window again), and the last pass claimed triggers or found partitions that another
// node's pass held. The completion consumer holds back the completions that take partition
// locks meanwhile (complete.Config.Heavy), and records them once the flow has ended.
func (a *Acquirer) Heavy() bool {
	return a.flowing.Load() && a.cfg.Now().UnixNano() < a.heavyUntil.Load()
}

// Result says what one acquire pass did.
type Result struct {
	Claimed     int       // triggers claimed (fired now or scheduled)
	FiredNow    int       // of which fired in an acquire transaction
	Full        bool      // some partition had a full batch: more may be due
	NextWaiting time.Time // earliest next fire time still WAITING, zero when none
	Busy        int       // partitions skipped because another transaction held them
	Direct      bool      // some partition claims nothing ahead: its flow is heavy
}

// A partition whose fire-ahead window holds directAbove triggers or more (or a full batch) is
// in a heavy flow: for directFor its passes claim nothing ahead, and fire what is due. Claiming
// ahead times a fire to the millisecond when the loop would otherwise sleep until it, but it
// costs a trigger update, a fired-row update and a transaction more per fire; in a heavy flow
// the loop passes every directWait anyway. Steady 5,000 fires/s on 2 nodes: 5.1 row writes a
// fire against 6.0, PostgreSQL 24.2–24.5 CPU s in 30 s against 26.4–27.0
// (docs/performance-history.md). directFor later a pass looks at the whole window again, and
// claims ahead once the flow is light.
const (
	directAbove = store.SmallBatch
	directFor   = time.Second
	directWait  = 5 * time.Millisecond
)

// heavyLimit is how many claims in a fire-ahead window of length ahead make the flow of a pass
// over n partitions heavy: directAbove a partition, but at most a batch, and at most two
// triggers for each directWait of the window (400 a second with the default 200 ms) whatever the
// number of partitions. A light flow's claims made ahead are fired by the queue a few at a time,
// each transaction costing what it costs whatever it fires: at 1,000 fires/s on 2 nodes, fired
// when due by passes every directWait, PostgreSQL used 17.5–19.4 CPU s in 30 s against
// 23.5–24.2, the machine 1,350–1,476 µs a fire against 1,681–1,724, fire lateness p99 11–14 ms
// against 34–78 (docs/performance-history.md). At 100 a
// second (half a trigger each directWait) the passes of both nodes, waking for each trigger,
// cost more than they save (PostgreSQL 10.3 CPU s against 7.9).
func heavyLimit(n int, ahead time.Duration, batch int) int {
	return min(directAbove*n, batch, max(directAbove, 2*int(ahead/directWait)))
}

// heavy reports whether claims, a pass's over a fire-ahead window of length ahead (ordered by
// fire time), make a heavy flow: limit or more of them, or as many in the window at their
// density. A flow that starts within the window fills only its end at first: counted as they
// stand, its first passes claimed it ahead, a few hundred triggers at a time, and the fire
// queue fired them in small transactions, late (a steady 5,000/s: fire lateness p99 of 60–150
// ms in its first half second). A span shorter than an eighth of the window (triggers due at
// one instant) counts as that eighth.
func heavy(claims []store.Claim, now time.Time, ahead time.Duration, limit int) bool {
	if len(claims) >= limit {
		return true
	}
	if len(claims) == 0 || ahead <= 0 {
		return false
	}
	span := claims[len(claims)-1].SchedTime.Sub(maxTime(now, claims[0].SchedTime))
	span = max(span, ahead/8)
	return float64(len(claims))*float64(ahead)/float64(span) >= float64(limit)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lightBelow: a pass that claimed fewer triggers makes the next one a single transaction over
// every partition.
const lightBelow = store.SmallBatch

// anyDirect reports whether some partition is in a heavy flow.
func (a *Acquirer) anyDirect() bool {
	now := a.cfg.Now()
	return slices.ContainsFunc(a.directUntil, func(t time.Time) bool { return now.Before(t) })
}

// The wait after a pass that left due triggers in partitions other transactions held.
const (
	busyRetryMin = 5 * time.Millisecond
	busyRetryMax = 200 * time.Millisecond
)

// busyBackoff is the wait after passes that left due triggers in held partitions: busyRetryMin
// after a pass that claimed in the partitions it got, doubling up to busyRetryMax while passes
// claim nothing. Doubling whenever some partition was held made a steady flow's passes wait up
// to busyRetryMax while completions took partitions in turn.
type busyBackoff struct{ d time.Duration }

// next is the wait after such a pass, which claimed claimed triggers.
func (b *busyBackoff) next(claimed int) time.Duration {
	if claimed > 0 {
		b.d = busyRetryMin
	} else {
		b.d = min(max(2*b.d, busyRetryMin), busyRetryMax)
	}
	return b.d
}

// reset starts over after a pass that left no due trigger behind.
func (b *busyBackoff) reset() { b.d = 0 }

// RunOnce is one acquire pass: a transaction per lock partition that no other node holds; one
// transaction in global mode, and for a light flow, or a heavy flow without a backlog, one over
// every partition no other holds.
func (a *Acquirer) RunOnce(ctx context.Context) (total Result, err error) {
	defer func() {
		a.backlog.Store(err == nil && total.Full)
		a.flowing.Store(err == nil && (total.Claimed > 0 || total.Busy > 0))
		if total.Full {
			a.backlogUntil = a.cfg.Now().Add(directFor)
		}
	}()
	if !a.cfg.Member.Joined() || !a.cfg.Clock.Synced() {
		return total, nil // declared failed, or the clock is not known: recovery puts it right
	}
	n := a.cfg.Locks.Count()
	start := a.next % n
	a.next++
	if len(a.directUntil) != n {
		a.directUntil = make([]time.Time, n)
	}
	// A backlog's partitions' transactions run Locks.Concurrency() at a time, as the fire
	// queue's and the completion consumer's do (store.AtOnceDefault says why one by default).
	// A light flow (the last pass claimed fewer than lightBelow, no partition in a heavy flow) is
	// claimed in one transaction that takes every partition no other holds: eight transactions
	// for a handful of claims, half of them finding their partition held, were most of what a
	// node cost at 1,000 fires/s. So is a heavy flow whose last pass claimed less than a full
	// batch: its passes, every directWait, fire a few dozen due triggers each, and a transaction
	// per partition for them cost half the fire lateness of a steady 5,000/s on 2 nodes (p50 /
	// p99 27–28 / 190–197 ms against 51–62 / 233–346) and a tenth of PostgreSQL's CPU. So is the
	// pass that looks at a heavy flow's whole window again once its partitions' directFor ran
	// out: a transaction per partition, four at a time, made that pass 40 ms long every second,
	// the steady 5,000/s's fire lateness p99. A backlog (a full batch: a burst) goes a
	// transaction per partition.
	//
	// A heavy flow's pass waits up to HeavyLockWait for the partitions that other transactions
	// hold rather than skipping them: those are mostly the other nodes' passes, each over every
	// partition, and a pass that skipped them backed off (busyBackoff), so that the nodes' passes
	// came 12–14 ms apart with idle gaps between them. Waiting, they follow each other. Not
	// within directFor of a backlog (a burst): there the other nodes hold partitions a
	// transaction each, and a pass that waited for all of them kept them out (bursts of 20,000 on
	// 2 nodes: 8,699–9,448 fires/s against 13,905–15,440 without waiting).
	var results []Result
	if heavyFlow := a.direct || a.anyDirect(); n > 1 && !a.backlog.Load() && (a.light || heavyFlow) {
		all := make([]int, n)
		for p := range all {
			all[p] = p
		}
		res, err := a.runPartitions(ctx, all, heavyFlow && a.cfg.Now().After(a.backlogUntil))
		if errors.Is(err, store.ErrPartitionsHeld) {
			res, err = a.runPartitions(ctx, all, false) // held by a stopped node? the others
		}
		if err != nil {
			return total, err
		}
		results = []Result{res}
	} else {
		results = make([]Result, n)
		var g errgroup.Group
		g.SetLimit(a.cfg.Locks.Concurrency())
		for i := range n {
			g.Go(func() error {
				var err error
				results[i], err = a.runPartitions(ctx, []int{(start + i) % n}, false)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return total, err
		}
	}
	for _, res := range results {
		total.Claimed += res.Claimed
		total.FiredNow += res.FiredNow
		total.Busy += res.Busy
		total.Direct = total.Direct || res.Direct
		total.Full = total.Full || res.Claimed == a.cfg.Batch
	}
	a.light, a.direct = total.Claimed < lightBelow && !total.Direct, total.Direct
	if total.Busy == n {
		return total, nil // nothing was read: the loop retries soon
	}
	// Once per pass, outside the partitions' transactions: it reads every partition, and the
	// partial index it walks holds the dead entries of every trigger that fired since the last
	// vacuum (up to 4 ms a call at 1,000 fires/s), which a lock holder should not wait for. One
	// statement, not a transaction: a heavy flow's passes come one after the other, and its
	// begin and commit were two of a pass's ten round trips.
	total.NextWaiting, err = a.nextWaiting(ctx)
	return total, err
}

// runPartitions is one acquire transaction in lock partitions ps: with wait in all of them,
// once other transactions let them go, else in those that no other transaction holds (nothing
// when it gets none). Claims already due are fired in it; later ones are marked ACQUIRED and
// handed to the queue after commit.
func (a *Acquirer) runPartitions(ctx context.Context, ps []int, wait bool) (Result, error) {
	var res Result
	var later []store.Claim
	err := a.outbox.InHotTx(ctx, func(tx *outbox.Tx) error {
		later, res = nil, Result{}
		taken := ps
		var err error
		if wait {
			_, err = a.cfg.Locks.WaitPartitionsAsMember(ctx, tx, ps, a.cfg.InstanceID, a.cfg.Member, a.cfg.HeavyLockWait)
		} else {
			taken, err = a.cfg.Locks.TryPartitionsAsMember(ctx, tx, ps, a.cfg.InstanceID, a.cfg.Member)
		}
		if err != nil {
			return err
		}
		res.Busy = len(ps) - len(taken)
		if len(taken) == 0 {
			return nil
		}
		now := a.cfg.Now()
		ahead := a.cfg.FireAhead
		// A partition in a heavy flow fires what is due. A transaction over several partitions
		// does so in all of them when one is in a heavy flow: the others' triggers fire when due
		// too, at most directWait late, rather than the heavy flow's whole window being read to
		// claim theirs ahead.
		if slices.ContainsFunc(taken, func(p int) bool { return now.Before(a.directUntil[p]) }) {
			ahead, res.Direct = 0, true
		}
		claims, err := a.selectDue(ctx, tx, now, ahead, taken)
		if err != nil {
			return err
		}
		if !res.Direct && heavy(claims, now, ahead, heavyLimit(len(taken), ahead, a.cfg.Batch)) {
			// A heavy flow (directAbove a partition): what is not due yet stays WAITING, for the
			// passes to come to fire.
			for _, p := range taken {
				a.directUntil[p] = now.Add(directFor)
			}
			a.heavyUntil.Store(now.Add(2 * directFor).UnixNano()) // past the next look at the window
			res.Direct = true
			claims = slices.DeleteFunc(claims, func(c store.Claim) bool { return c.SchedTime.After(now) })
		}
		var due []store.Claim
		for _, c := range claims {
			if c.SchedTime.After(now) {
				c.Ahead = true // fired in a transaction of its own, which reads it again then
				later = append(later, c)
			} else {
				due = append(due, c)
			}
		}
		if later, err = a.markAcquired(ctx, tx, later, now); err != nil {
			return err
		}
		if res.FiredNow, err = a.firer.Fire(ctx, tx, due); err != nil {
			return err
		}
		res.Claimed = len(claims)
		if n := len(claims); n > 0 {
			tx.OnCommit(func() { a.metrics.batch.Record(ctx, float64(n)) })
		}
		return nil
	})
	// The queue gets the claims made ahead even when the transaction failed: a commit whose answer
	// was lost (the database went away) may have stored them, and a node must not leave a claim
	// it holds unfired. Claims that were not stored are found stale at fire time and dropped.
	a.queue.Add(later)
	if err != nil {
		return Result{}, fmt.Errorf("acquiring triggers: %w", err)
	}
	return res, nil
}

// nextWaiting is the earliest next fire time of a WAITING trigger, zero when none.
func (a *Acquirer) nextWaiting(ctx context.Context) (time.Time, error) {
	var next *time.Time
	if err := a.pool.QueryRow(ctx, queries.Get("NextWaiting"), a.cfg.Namespace).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("reading next fire time: %w", err)
	}
	if next == nil {
		return time.Time{}, nil
	}
	return *next, nil
}

// selectDue reads the triggers due by now+ahead in lock partitions ps, which tx holds. tx is a
// hot one (store.InHotTx): SelectDue needs its index order.
func (a *Acquirer) selectDue(ctx context.Context, tx pgx.Tx, now time.Time, ahead time.Duration, ps []int) ([]store.Claim, error) {
	rows, err := tx.Query(ctx, queries.Get("SelectDue"), a.cfg.Namespace,
		now.Add(ahead), now.Add(-a.cfg.MisfireThreshold), a.cfg.Batch, a.cfg.Locks.Count(), ps)
	if err != nil {
		return nil, fmt.Errorf("selecting due triggers: %w", err)
	}
	defer rows.Close()
	var claims []store.Claim
	// Quartz acquires at most one trigger of a non-concurrent job per batch.
	seenNonconcurrent := map[events.Key]bool{}
	for rows.Next() {
		c := store.Claim{Read: &store.FireRow{}}
		if err := rows.Scan(append([]any{&c.TriggerGroup, &c.TriggerName, &c.JobGroup, &c.JobName, &c.SchedTime,
			&c.Priority, &c.Nonconcurrent, &c.RequestsRecovery, &c.Partition}, c.Read.Fields()...)...); err != nil {
			return nil, fmt.Errorf("reading due trigger: %w", err)
		}
		if c.Nonconcurrent {
			if seenNonconcurrent[c.Job()] {
				continue
			}
			seenNonconcurrent[c.Job()] = true
		}
		c.FireID, c.Epoch = uuid.Must(uuid.NewV7()), a.cfg.Member.Epoch()
		claims = append(claims, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("selecting due triggers: %w", err)
	}
	return claims, nil
}

// markAcquired moves later-due triggers to ACQUIRED and writes their fired rows; it returns the
// claims whose guarded update matched.
func (a *Acquirer) markAcquired(ctx context.Context, tx pgx.Tx, claims []store.Claim, now time.Time) ([]store.Claim, error) {
	if len(claims) == 0 {
		return nil, nil
	}
	g, n, nft := make([]string, len(claims)), make([]string, len(claims)), make([]time.Time, len(claims))
	tids, expect := make([]pgtype.TID, len(claims)), make([]string, len(claims))
	for i, c := range claims {
		g[i], n[i], nft[i], tids[i], expect[i] = c.TriggerGroup, c.TriggerName, c.SchedTime, c.Read.TID, store.StateWaiting
	}
	rows, err := tx.Query(ctx, queries.Get("MarkAcquired"), tids, g, n, nft, expect)
	if err != nil {
		return nil, fmt.Errorf("marking triggers acquired: %w", err)
	}
	keys, err := pgx.CollectRows(rows, store.ScanKey)
	if err != nil {
		return nil, fmt.Errorf("marking triggers acquired: %w", err)
	}
	ok := make(map[events.Key]bool, len(keys))
	for _, k := range keys {
		ok[k] = true
	}
	kept := slices.DeleteFunc(claims, func(c store.Claim) bool { return !ok[c.Trigger()] })
	for i := range kept {
		kept[i].Read = nil // the row has moved, and the fire reads it again in its own transaction
	}
	if err := store.InsertFired(ctx, tx, a.cfg.Namespace, a.cfg.InstanceID, store.FiredAcquired, now, kept); err != nil {
		return nil, err
	}
	return kept, nil
}
