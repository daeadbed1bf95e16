package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/trigger"
)

// TriggerTimes is a trigger's schedule and fire times as its row holds them: what the misfire
// handling and a calendar's replacement recompute.
type TriggerTimes struct {
	Key      events.Key
	State    string // its state when read
	Schedule []byte
	Next     time.Time
	Prev     *time.Time
	Times    int
	Calendar string
}

// ScanTriggerTimes reads the columns trigger_group, trigger_name, state, schedule, next_fire_time,
// prev_fire_time, times_triggered, calendar_name (or ”) in that order, for pgx.CollectRows.
func ScanTriggerTimes(row pgx.CollectableRow) (TriggerTimes, error) {
	var m TriggerTimes
	err := row.Scan(&m.Key.Group, &m.Key.Name, &m.State, &m.Schedule, &m.Next, &m.Prev, &m.Times, &m.Calendar)
	return m, err
}

// Misfired is what ApplyMisfire did to a trigger.
type Misfired struct {
	// State is the state the trigger went to; "" when the guard failed and nothing changed.
	State string
	// Instruction is the misfire instruction applied ("smart_policy" when it set none).
	Instruction string
	// Broken, when not nil, says why the trigger's schedule or calendar could not be read: it
	// went to ERROR instead.
	Broken error
}

// ApplyMisfire applies m's misfire instruction at now (Quartz's updateAfterMisfire) and stores
// the trigger's new schedule and fire times in state to (COMPLETE when it will not fire again),
// guarded by the state and next fire time m was read with. It returns the TriggerMisfired event
// (a broken trigger's TriggerError) and what it did.
func ApplyMisfire(ctx context.Context, tx pgx.Tx, origin events.Origin, m TriggerTimes, cals Calendars, now time.Time, to string) ([]events.Event, Misfired, error) {
	cal, broken := cals.For(m.Calendar)
	var t *trigger.Trigger
	if broken == nil {
		t, broken = trigger.Restore(m.Schedule, &m.Next, m.Prev, m.Times)
	}
	if broken != nil {
		evs, err := SetTriggerError(ctx, tx, origin, map[events.Key]string{m.Key: broken.Error()}, now)
		return evs, Misfired{State: StateError, Broken: broken}, err
	}
	t.UpdateAfterMisfire(cal, now)
	schedule, err := json.Marshal(t.Definition)
	if err != nil {
		return nil, Misfired{}, fmt.Errorf("encoding trigger schedule: %w", err)
	}
	done := Misfired{State: to, Instruction: cmp.Or(t.Misfire, "smart_policy")}
	if t.NextFireTime.IsZero() {
		done.State = StateComplete
	}
	tag, err := tx.Exec(ctx, queries.Get("UpdateMisfired"), origin.Namespace, m.Key.Group, m.Key.Name,
		NullTime(t.NextFireTime), NullTime(t.PreviousFireTime), t.TimesTriggered, schedule, m.Next, m.State, done.State)
	if err != nil {
		return nil, Misfired{}, fmt.Errorf("rescheduling misfired trigger %s: %w", m.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return nil, Misfired{}, nil // it changed since it was read: nothing was done, nothing is logged
	}
	// The data carries the row as it now is, for replay.
	ev, err := origin.Trigger(events.TypeTriggerMisfired, m.Key, now, map[string]any{
		"trigger": m.Key, "missedFireTime": m.Next.UTC(), "nextFireTime": NullTime(t.NextFireTime),
		"instruction": done.Instruction, "previousFireTime": NullTime(t.PreviousFireTime),
		"timesTriggered": t.TimesTriggered, "schedule": json.RawMessage(schedule), "state": done.State})
	if err != nil {
		return nil, Misfired{}, err
	}
	return []events.Event{ev}, done, nil
}
