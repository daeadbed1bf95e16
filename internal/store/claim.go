package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
}

// InsertFired writes the fired_triggers rows of claims in one statement.
func InsertFired(ctx context.Context, tx pgx.Tx, namespace, instanceID, state string, now time.Time, claims []Claim) error {
	if len(claims) == 0 {
		return nil
	}
	n := len(claims)
	ids := make([]uuid.UUID, n)
	tg, tn, jg, jn := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	sched := make([]time.Time, n)
	nc, rr := make([]bool, n), make([]bool, n)
	prio := make([]int32, n)
	for i, c := range claims {
		ids[i], tg[i], tn[i], jg[i], jn[i] = c.FireID, c.TriggerGroup, c.TriggerName, c.JobGroup, c.JobName
		sched[i], nc[i], rr[i], prio[i] = c.SchedTime, c.Nonconcurrent, c.RequestsRecovery, int32(c.Priority)
	}
	_, err := tx.Exec(ctx, queries.Get("InsertFired"),
		namespace, instanceID, now, state, ids, tg, tn, jg, jn, sched, nc, rr, prio)
	if err != nil {
		return fmt.Errorf("inserting %d fired-trigger rows: %w", n, err)
	}
	return nil
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
