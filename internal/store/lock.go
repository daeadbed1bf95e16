package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/events"
)

// Slots is the number of partition slots a trigger's job hashes to (triggers.partition). A lock
// partition covers the slots equal to it modulo the partition count, so the count can change
// between restarts without stranding a trigger.
const Slots = 1024

// AtOnceDefault is how many transactions of different lock partitions a node's loop (an acquire
// pass over a backlog, the fire queue, the completion consumer) runs at once, unless
// Locks.AtOnce says. Every node of a cluster runs that many on the same database, so what
// PostgreSQL sees grows with the nodes: on 2 cores shared with everything else, bursts on 2
// and 4 nodes cost PostgreSQL less CPU, for the same or faster fires, one at a time than two,
// and two than four (docs/performance-history.md). With cores to spare, more at once lets the last
// partition's work go without waiting for all the others' commits. It stays below the node's
// pool size.
const AtOnceDefault = 1

// SmallBatch is the most claims or completions a loop applies in one transaction that takes
// all their partitions, in ascending order, rather than a transaction per partition. A steady
// flow brings a few at a time, spread over the partitions: a transaction per partition then
// held one or two, and a small transaction's cost is mostly its fixed statements and commit
// (docs/performance-history.md). Bursts, larger, keep a transaction per partition, several at once.
const SmallBatch = 64

// Locks is the lock protocol of one namespace, in one of two modes (docs/architecture.md, "The lock protocol"):
//
//   - global (Partitions ≤ 1): one TRIGGER_ACCESS row serialises every acquire, fire,
//     completion and trigger write, exactly as Quartz;
//   - partitioned (Partitions = P > 1): rows TRIGGER_ACCESS/0 … /P-1. A trigger belongs to the
//     partition of its job (so a non-concurrent job's triggers block each other locally); acquirers
//     take any free partition with SKIP LOCKED, so nodes do not queue behind each other, and writes
//     that span jobs take the partitions they touch in ascending order, so they cannot deadlock.
//
// Every path takes its locks through these methods; each holds them until its transaction ends.
type Locks struct {
	Namespace  string
	Partitions int
	// AtOnce is how many of a loop's transactions in different partitions run at once; 0 is
	// AtOnceDefault.
	AtOnce int
	// Wait, when set, records how long each lock partition taken with Partition was waited for
	// (the node's agate.scheduler.lock.wait).
	Wait metric.Float64Histogram
}

// Count is the number of lock partitions (1 in global mode).
func (l Locks) Count() int { return max(l.Partitions, 1) }

// Concurrency is how many of a loop's transactions in different partitions run at once.
func (l Locks) Concurrency() int { return min(cmp.Or(l.AtOnce, AtOnceDefault), l.Count()) }

// SlotOf is the partition slot of a job, stored in its triggers' partition column.
func SlotOf(jobGroup, jobName string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(jobGroup))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(jobName))
	return int(h.Sum32() % Slots)
}

// PartitionOf is the lock partition of a job.
func (l Locks) PartitionOf(jobGroup, jobName string) int {
	return SlotOf(jobGroup, jobName) % l.Count()
}

func (l Locks) name(p int) string {
	if l.Count() == 1 {
		return LockTriggerAccess
	}
	return LockTriggerAccess + "/" + strconv.Itoa(p)
}

// Ensure inserts the namespace's lock rows (Quartz inserts them lazily too) and its outbox cursor.
func (l Locks) Ensure(ctx context.Context, pool *pgxpool.Pool) error {
	for p := range l.Count() {
		if _, err := pool.Exec(ctx, queries.Get("EnsureLock"), l.Namespace, l.name(p)); err != nil {
			return fmt.Errorf("creating lock rows: %w", err)
		}
	}
	for _, name := range []string{LockStateAccess, LockPausedGroups} {
		if _, err := pool.Exec(ctx, queries.Get("EnsureLock"), l.Namespace, name); err != nil {
			return fmt.Errorf("creating lock rows: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, queries.Get("EnsureOutboxCursor"), l.Namespace); err != nil {
		return fmt.Errorf("creating outbox cursor: %w", err)
	}
	return nil
}

// Mode is the lock mode's name: "global" or "partitioned".
func (l Locks) Mode() string {
	if l.Count() == 1 {
		return "global"
	}
	return "partitioned"
}

// ErrSettingsDiffer says a node's lock settings disagree with those of the nodes running.
var ErrSettingsDiffer = errors.New("lock settings differ from the running nodes'")

// Agree records the namespace's lock settings when it has none, and otherwise checks that this
// node's agree with them: nodes that lock different rows lose mutual exclusion. Settings may
// change only while no other node of the namespace is alive (instanceID is this node's).
func (l Locks) Agree(ctx context.Context, pool *pgxpool.Pool, instanceID string) (changed bool, err error) {
	err = InTx(ctx, pool, func(tx pgx.Tx) error {
		if err := WithLock(ctx, tx, l.Namespace, LockStateAccess); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queries.Get("InsertSettings"), l.Namespace, l.Mode(), l.Count()); err != nil {
			return fmt.Errorf("recording lock settings: %w", err)
		}
		var mode string
		var partitions int
		if err := tx.QueryRow(ctx, queries.Get("ReadSettings"), l.Namespace).Scan(&mode, &partitions); err != nil {
			return fmt.Errorf("reading lock settings: %w", err)
		}
		if mode == l.Mode() && partitions == l.Count() {
			return nil
		}
		rows, err := tx.Query(ctx, queries.Get("LiveNodes"), l.Namespace, instanceID)
		if err != nil {
			return fmt.Errorf("reading cluster members: %w", err)
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("reading cluster members: %w", err)
		}
		if len(live) > 0 {
			return fmt.Errorf("%w: namespace %q runs with --lock-mode %s --partitions %d (nodes %v); this node has "+
				"--lock-mode %s --partitions %d. Start it with the same settings, or stop every node of the namespace to change them",
				ErrSettingsDiffer, l.Namespace, mode, partitions, live, l.Mode(), l.Count())
		}
		if _, err := tx.Exec(ctx, queries.Get("UpdateSettings"), l.Namespace, l.Mode(), l.Count()); err != nil {
			return fmt.Errorf("changing lock settings: %w", err)
		}
		changed = true
		return nil
	})
	return changed, err
}

// Partition takes lock partition p, waiting for it.
func (l Locks) Partition(ctx context.Context, tx pgx.Tx, p int) error {
	_, err := l.PartitionWaited(ctx, tx, p)
	return err
}

// PartitionWaited is Partition, and says how long it waited: the time a transaction queued
// behind the others of the partition (recorded in Wait too).
func (l Locks) PartitionWaited(ctx context.Context, tx pgx.Tx, p int) (time.Duration, error) {
	start := time.Now()
	if err := WithLock(ctx, tx, l.Namespace, l.name(p)); err != nil {
		return 0, err
	}
	waited := time.Since(start)
	if l.Wait != nil {
		l.Wait.Record(ctx, waited.Seconds())
	}
	return waited, nil
}

// PartitionsAsMember is PartitionsWaited, then CheckMember with instanceID and m (nil: none),
// in one round trip: the statements run in the order sent, so the partitions are taken in
// order and the membership is read once they are held, without a wait for each answer in
// between.
func (l Locks) PartitionsAsMember(ctx context.Context, tx pgx.Tx, ps []int, instanceID string, m *Member) (time.Duration, error) {
	return l.partitionsAsMember(ctx, tx, ps, instanceID, m, 0)
}

// ErrPartitionsHeld: WaitPartitionsAsMember gave up on a partition that another transaction
// held longer than it would wait (a *PartitionHeldError says which). The transaction is aborted.
var ErrPartitionsHeld = errors.New("a lock partition was held longer than the wait allowed")

// PartitionHeldError is ErrPartitionsHeld for lock partition Partition, held by another
// transaction for longer than Wait.
type PartitionHeldError struct {
	Partition int
	Wait      time.Duration
}

func (e *PartitionHeldError) Error() string {
	return fmt.Sprintf("lock partition %d was held by another transaction for longer than %s", e.Partition, e.Wait)
}

// Is makes a PartitionHeldError match ErrPartitionsHeld.
func (e *PartitionHeldError) Is(target error) bool { return target == ErrPartitionsHeld }

// WaitPartitionsAsMember is PartitionsAsMember waiting at most d for each partition
// (a *PartitionHeldError when one stays held): for a loop that would rather follow other
// transactions in a partition than skip it, but not stall behind one that stays (its node
// stopped in the middle). With d ≤ 0, and in global mode (one lock: nothing else to do
// meanwhile), it waits as long as it takes. On a PartitionHeldError tx is aborted.
func (l Locks) WaitPartitionsAsMember(ctx context.Context, tx pgx.Tx, ps []int, instanceID string, m *Member, d time.Duration) (time.Duration, error) {
	if l.Count() == 1 || d <= 0 {
		d = 0
	} else {
		d = max(d, time.Millisecond) // lock_timeout is in whole milliseconds; 0 is none
	}
	return l.partitionsAsMember(ctx, tx, ps, instanceID, m, d)
}

// isLockTimeout reports a statement that gave up waiting for a lock (lock_timeout).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// partitionsAsMember is PartitionsAsMember, with lock_timeout set to wait (0: none) while it
// takes the partitions.
func (l Locks) partitionsAsMember(ctx context.Context, tx pgx.Tx, ps []int, instanceID string, m *Member, wait time.Duration) (time.Duration, error) {
	ps = slices.Compact(slices.Sorted(slices.Values(ps)))
	timed := wait > 0 && len(ps) > 0
	b := &pgx.Batch{}
	if timed {
		b.Queue(fmt.Sprintf("set local lock_timeout = %d", wait.Milliseconds()))
	}
	for _, p := range ps {
		b.Queue(queries.Get("Lock"), l.Namespace, l.name(p))
	}
	if timed {
		b.Queue("set local lock_timeout = 0")
	}
	checkMember, err := queueMember(b, l.Namespace, instanceID, m)
	if err != nil {
		return 0, err
	}
	if b.Len() == 0 {
		return 0, nil
	}
	start := time.Now()
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if timed {
		if _, err := br.Exec(); err != nil {
			return 0, fmt.Errorf("setting the lock wait: %w", err)
		}
	}
	var waited time.Duration
	for _, p := range ps {
		var one int
		err := br.QueryRow().Scan(&one)
		if timed && isLockTimeout(err) {
			return waited, &PartitionHeldError{Partition: p, Wait: wait}
		}
		if err := lockErr(err, l.Namespace, l.name(p)); err != nil {
			return waited, err
		}
		w := time.Since(start) - waited // the answers come in order: this lock's share
		waited += w
		if l.Wait != nil {
			l.Wait.Record(ctx, w.Seconds())
		}
	}
	if timed {
		if _, err := br.Exec(); err != nil {
			return waited, fmt.Errorf("resetting the lock wait: %w", err)
		}
	}
	if err := checkMember(br); err != nil {
		return waited, err
	}
	return waited, br.Close()
}

// TryPartitionAsMember is TryPartition, then CheckMember with instanceID and m, in one round
// trip (see PartitionsAsMember). The membership is checked only when the partition was taken.
func (l Locks) TryPartitionAsMember(ctx context.Context, tx pgx.Tx, p int, instanceID string, m *Member) (bool, error) {
	taken, err := l.TryPartitionsAsMember(ctx, tx, []int{p}, instanceID, m)
	return len(taken) == 1, err
}

// TryPartitionsAsMember takes those of lock partitions ps that no other transaction holds (in
// one statement: it waits for none, so their order cannot deadlock), then checks the membership
// (CheckMember with instanceID and m), in one round trip, and returns the partitions it took, in
// ascending order. The membership is checked only when it took one. In global mode it waits for
// the single lock, as Quartz's acquirers do.
func (l Locks) TryPartitionsAsMember(ctx context.Context, tx pgx.Tx, ps []int, instanceID string, m *Member) ([]int, error) {
	ps = slices.Compact(slices.Sorted(slices.Values(ps)))
	if l.Count() == 1 {
		if _, err := l.PartitionsAsMember(ctx, tx, ps, instanceID, m); err != nil {
			return nil, err
		}
		return ps, nil
	}
	names := make([]string, len(ps))
	byName := make(map[string]int, len(ps))
	for i, p := range ps {
		names[i] = l.name(p)
		byName[names[i]] = p
	}
	b := &pgx.Batch{}
	b.Queue(queries.Get("TryLocks"), l.Namespace, names)
	checkMember, err := queueMember(b, l.Namespace, instanceID, m)
	if err != nil {
		return nil, err
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("taking lock partitions %v: %w", ps, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("taking lock partitions %v: %w", ps, err)
	}
	taken := make([]int, 0, len(got))
	for _, name := range got {
		taken = append(taken, byName[name])
	}
	slices.Sort(taken)
	if len(taken) > 0 {
		if err := checkMember(br); err != nil {
			return nil, err
		}
	}
	return taken, br.Close()
}

// TryPartition takes lock partition p if no other transaction holds it. In global mode it waits
// for the single lock, as Quartz's acquirers do.
func (l Locks) TryPartition(ctx context.Context, tx pgx.Tx, p int) (bool, error) {
	return l.TryPartitionAsMember(ctx, tx, p, "", nil)
}

// Jobs takes the partitions of the given jobs, in ascending order.
func (l Locks) Jobs(ctx context.Context, tx pgx.Tx, jobs []events.Key) error {
	_, err := l.PartitionsWaited(ctx, tx, l.PartitionsOfJobs(jobs))
	return err
}

// PartitionsOfJobs is the lock partitions of jobs, one for each.
func (l Locks) PartitionsOfJobs(jobs []events.Key) []int {
	ps := make([]int, len(jobs))
	for i, j := range jobs {
		ps[i] = l.PartitionOf(j.Group, j.Name)
	}
	return ps
}

// PartitionsWaited takes lock partitions ps, each once, in ascending order (the lock order), and
// says how long it waited for them in all. The statements go in one round trip.
func (l Locks) PartitionsWaited(ctx context.Context, tx pgx.Tx, ps []int) (time.Duration, error) {
	return l.PartitionsAsMember(ctx, tx, ps, "", nil)
}

// All takes every partition, in ascending order: for writes whose jobs are not known up front
// (commands, recovery). In partitioned mode it first takes the paused-groups row, which
// transactions inserting new jobs hold shared (NewJobs), so that the paused groups change only
// while none of them runs.
func (l Locks) All(ctx context.Context, tx pgx.Tx) error {
	if l.Count() > 1 {
		if err := WithLock(ctx, tx, l.Namespace, LockPausedGroups); err != nil {
			return err
		}
	}
	for p := range l.Count() {
		if err := l.Partition(ctx, tx, p); err != nil {
			return err
		}
	}
	return nil
}

// AllWithin is All, waiting at most d for each lock in partitioned mode: for a transaction that
// would otherwise hold the partitions below one that stays held (its node stopped in the
// middle of a transaction) and stall every fire in them meanwhile. It returns an error that is
// ErrPartitionsHeld when it gave up; tx is then aborted. In global mode, or with d ≤ 0, it
// waits as long as it takes.
func (l Locks) AllWithin(ctx context.Context, tx pgx.Tx, d time.Duration) error {
	if l.Count() == 1 || d <= 0 {
		return l.All(ctx, tx)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("set local lock_timeout = %d", max(d.Milliseconds(), 1))); err != nil {
		return fmt.Errorf("setting the lock wait: %w", err)
	}
	if err := l.All(ctx, tx); err != nil {
		if isLockTimeout(err) {
			return fmt.Errorf("%w (%s): %w", ErrPartitionsHeld, d, err)
		}
		return err
	}
	if _, err := tx.Exec(ctx, "set local lock_timeout = 0"); err != nil {
		return fmt.Errorf("resetting the lock wait: %w", err)
	}
	return nil
}

// NewJobs takes what a transaction that inserts new jobs with their new triggers needs, and says
// whether any trigger group is paused (a new trigger of a paused group starts PAUSED). Rows no
// other transaction sees until the commit need no partition: the acquirers cannot claim them
// before, and a concurrent insert of the same key fails on the primary key. What they need is
// paused groups that do not change until the commit, so in partitioned mode NewJobs holds the
// paused-groups row shared: such transactions run side by side, with each other and with the
// fires, while group commands (All) wait for them. In global mode it takes the single lock, as
// Quartz's storeJobAndTrigger does.
func (l Locks) NewJobs(ctx context.Context, tx pgx.Tx) (groupsPaused bool, err error) {
	if l.Count() == 1 {
		if err := l.Partition(ctx, tx, 0); err != nil {
			return false, err
		}
		return l.GroupsPaused(ctx, tx)
	}
	// Two statements in one round trip: the second reads the paused groups after the first got
	// the row (each statement of a READ COMMITTED transaction reads its own snapshot).
	var b pgx.Batch
	b.Queue(queries.Get("LockShared"), l.Namespace, LockPausedGroups)
	b.Queue(queries.Get("AnyGroupPaused"), l.Namespace)
	res := tx.SendBatch(ctx, &b)
	defer res.Close()
	var one int
	if err := lockErr(res.QueryRow().Scan(&one), l.Namespace, LockPausedGroups); err != nil {
		return false, err
	}
	if err := res.QueryRow().Scan(&groupsPaused); err != nil {
		return false, fmt.Errorf("reading paused groups: %w", err)
	}
	return groupsPaused, res.Close()
}

// GroupsPaused says whether any trigger group is paused, for a transaction that holds every
// partition (All) or NewJobs.
func (l Locks) GroupsPaused(ctx context.Context, tx pgx.Tx) (paused bool, err error) {
	if err := tx.QueryRow(ctx, queries.Get("AnyGroupPaused"), l.Namespace).Scan(&paused); err != nil {
		return false, fmt.Errorf("reading paused groups: %w", err)
	}
	return paused, nil
}
