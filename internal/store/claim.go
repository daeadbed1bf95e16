package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/agatesched/agate/internal/events"
)

// Fired-trigger row states (Quartz's names).
const (
	FiredAcquired  = "ACQUIRED"
	FiredExecuting = "EXECUTING"
)

// Trigger states (Quartz's names).
const (
	StateWaiting       = "WAITING"
	StateAcquired      = "ACQUIRED"
	StateBlocked       = "BLOCKED"
	StatePaused        = "PAUSED"
	StatePausedBlocked = "PAUSED_BLOCKED"
	StateComplete      = "COMPLETE"
	StateError         = "ERROR"
)

// AllGroupsPaused is Quartz's marker row in paused_trigger_grps for pause_all: a trigger of any
// group added later starts PAUSED.
const AllGroupsPaused = "_$_ALL_GROUPS_PAUSED_$_"

// Claim is one scheduled fire of one trigger that a node has taken: the fired_triggers row. It is
// the hand-off from acquire to fire.
type Claim struct {
	FireID           uuid.UUID
	TriggerGroup     string
	TriggerName      string
	JobGroup         string
	JobName          string
	SchedTime        time.Time // the trigger's next_fire_time when it was claimed
	Priority         int
	Nonconcurrent    bool
	RequestsRecovery bool
	Partition        int // the lock partition the claim was made under (Locks)
	// Epoch is the membership epoch of the node that made the claim (see Member).
	Epoch int64
	// Ahead says the claim was made before its fire time: its trigger is ACQUIRED and it has a
	// fired row in state ACQUIRED. Otherwise it is fired in the transaction that made it, and its
	// trigger is still WAITING.
	Ahead bool
	// Read is what the claim's transaction read of its trigger and job with the claim, when it
	// fires the claim itself: the fire then reads them no second time. Nil for a claim made
	// ahead, which is fired in a transaction of its own.
	Read *FireRow
}

// FireRow is what a fire reads of a claim's trigger and job (fire's LoadForFire, and acquire's
// SelectDue for the claims it fires at once).
type FireRow struct {
	State        string
	Next, Prev   *time.Time
	Times        int
	Schedule     []byte
	Calendar     string
	TriggerData  []byte
	TraceParent  string
	JobType      string
	JobData      []byte
	TimeoutMilli *int64
	PersistData  bool
	// TID is where the trigger's row was read, in the transaction that fires or claims it (which
	// holds its partition's lock): the update goes straight there instead of probing the
	// primary key again.
	TID pgtype.TID
}

// Fields are the scan destinations of r's columns, in the order the queries select them.
func (r *FireRow) Fields() []any {
	return []any{&r.State, &r.Next, &r.Prev, &r.Times, &r.Schedule, &r.Calendar, &r.TriggerData, &r.TraceParent,
		&r.JobType, &r.JobData, &r.TimeoutMilli, &r.PersistData, &r.TID}
}

// Trigger is the key of the claim's trigger.
func (c Claim) Trigger() events.Key { return events.Key{Group: c.TriggerGroup, Name: c.TriggerName} }

// Job is the key of the claim's job.
func (c Claim) Job() events.Key { return events.Key{Group: c.JobGroup, Name: c.JobName} }

// InsertFired writes the fired_triggers rows of claims in one statement.
func InsertFired(ctx context.Context, tx pgx.Tx, namespace, instanceID, state string, now time.Time, claims []Claim) error {
	if len(claims) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	read := QueueInsertFired(b, namespace, instanceID, state, now, claims)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if err := read(br); err != nil {
		return err
	}
	return br.Close()
}

// QueueInsertFired queues InsertFired's statement on b, for a caller that sends it in one round
// trip with others; the function it returns reads its result from b's BatchResults, in b's order.
// It queues nothing (and reads nothing) when claims is empty.
func QueueInsertFired(b *pgx.Batch, namespace, instanceID, state string, now time.Time, claims []Claim) func(pgx.BatchResults) error {
	n := len(claims)
	if n == 0 {
		return func(pgx.BatchResults) error { return nil }
	}
	ids := make([]uuid.UUID, n)
	tg, tn, jg, jn := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	sched := make([]time.Time, n)
	nc, rr := make([]bool, n), make([]bool, n)
	prio := make([]int32, n)
	epochs := make([]int64, n)
	for i, c := range claims {
		ids[i], tg[i], tn[i], jg[i], jn[i] = c.FireID, c.TriggerGroup, c.TriggerName, c.JobGroup, c.JobName
		sched[i], nc[i], rr[i], prio[i], epochs[i] = c.SchedTime, c.Nonconcurrent, c.RequestsRecovery, int32(c.Priority), c.Epoch
	}
	results := queueGeneric(b, queries.Get("InsertFired"),
		[]any{namespace, instanceID, now, state, ids, tg, tn, jg, jn, sched, nc, rr, prio, epochs})
	return func(br pgx.BatchResults) error {
		err := results(br, func(br pgx.BatchResults) error {
			_, err := br.Exec()
			return err
		})
		if err != nil {
			return fmt.Errorf("inserting %d fired-trigger rows: %w", n, err)
		}
		return nil
	}
}

// DeleteFired deletes fired_triggers rows by entry id.
func DeleteFired(ctx context.Context, tx pgx.Tx, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, queries.Get("DeleteFired"), ids); err != nil {
		return fmt.Errorf("deleting %d fired-trigger rows: %w", len(ids), err)
	}
	return nil
}

// NullTime is t in UTC for a nullable timestamptz column (and JSON field): nil for the zero time,
// which the trigger package uses for "none".
func NullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ReleaseClaims gives back claims that will not be fired: those with the given fire ids and all
// those made by the given nodes. Their fired rows go and their triggers return to WAITING,
// guarded by the claimed fire time, so a trigger that moved on is left alone. It returns the
// released triggers.
func ReleaseClaims(ctx context.Context, tx pgx.Tx, namespace string, fireIDs []uuid.UUID, instances []string) ([]events.Key, error) {
	if len(fireIDs) == 0 && len(instances) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, queries.Get("ReleaseClaims"), namespace, fireIDs, instances)
	if err != nil {
		return nil, fmt.Errorf("releasing claims: %w", err)
	}
	keys, err := pgx.CollectRows(rows, ScanKey)
	if err != nil {
		return nil, fmt.Errorf("releasing claims: %w", err)
	}
	return keys, nil
}

// ScanKey reads a (group, name) row, for pgx.CollectRows.
func ScanKey(row pgx.CollectableRow) (events.Key, error) {
	var k events.Key
	err := row.Scan(&k.Group, &k.Name)
	return k, err
}

// SetTriggerError puts triggers in the ERROR state (Quartz's: they stop firing until replaced),
// each for the reason given, and returns a TriggerError event from origin for each that exists.
func SetTriggerError(ctx context.Context, tx pgx.Tx, origin events.Origin, reasons map[events.Key]string, now time.Time) ([]events.Event, error) {
	if len(reasons) == 0 {
		return nil, nil
	}
	var g, n []string
	for k := range reasons {
		g, n = append(g, k.Group), append(n, k.Name)
	}
	rows, err := tx.Query(ctx, queries.Get("SetTriggerError"), origin.Namespace, g, n)
	if err != nil {
		return nil, fmt.Errorf("putting triggers in ERROR: %w", err)
	}
	keys, err := pgx.CollectRows(rows, ScanKey)
	if err != nil {
		return nil, fmt.Errorf("putting triggers in ERROR: %w", err)
	}
	evs := make([]events.Event, 0, len(keys))
	for _, k := range keys {
		ev, err := origin.Trigger(events.TypeTriggerError, k, now, map[string]any{"trigger": k, "reason": reasons[k]})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// ErrFenced says this node is no longer a member of the cluster under the epoch it holds: the
// cluster declared it failed (it did not check in within the grace) and released its claims.
var ErrFenced = errors.New("this node was declared failed by the cluster; it must rejoin before it claims again")

// CheckMember verifies, inside tx, that the node is still a member under the epoch m holds, and
// keeps it one until tx ends. Transactions that claim or fire call it first: a node declared
// failed must not. A nil m (a step used on its own, in tests) checks nothing.
func CheckMember(ctx context.Context, tx pgx.Tx, namespace, instanceID string, m *Member) error {
	if m == nil {
		return nil
	}
	epoch := m.Epoch()
	if epoch == 0 {
		return ErrFenced
	}
	return memberIs(epoch, tx.QueryRow(ctx, queries.Get("MemberEpoch"), namespace, instanceID))
}

// queueMember queues CheckMember's read on b and returns what checks its result; for a nil m
// nothing is queued and the check passes. A node that holds no epoch is fenced at once.
func queueMember(b *pgx.Batch, namespace, instanceID string, m *Member) (func(pgx.BatchResults) error, error) {
	if m == nil {
		return func(pgx.BatchResults) error { return nil }, nil
	}
	epoch := m.Epoch()
	if epoch == 0 {
		return nil, ErrFenced
	}
	b.Queue(queries.Get("MemberEpoch"), namespace, instanceID)
	return func(br pgx.BatchResults) error { return memberIs(epoch, br.QueryRow()) }, nil
}

// memberIs reads the result of MemberEpoch: nil when the node's row holds epoch.
func memberIs(epoch int64, row pgx.Row) error {
	var current int64
	err := row.Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && current != epoch) {
		return ErrFenced
	}
	if err != nil {
		return fmt.Errorf("reading cluster membership: %w", err)
	}
	return nil
}
