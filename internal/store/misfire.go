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

// ApplyMisfire applies m's misfire instruction at now (Quartz's updateAfterMisfire) and stores
// the trigger's new schedule and fire times in state to (COMPLETE when it will not fire again),
// guarded by the state and next fire time m was read with. It returns the TriggerMisfired event
// and the state the trigger went to ("" when the guard failed and nothing changed).
// A trigger whose schedule or calendar cannot be read is put in ERROR instead: broken says why
// and the events are its TriggerError.
func ApplyMisfire(ctx context.Context, tx pgx.Tx, origin events.Origin, m TriggerTimes, cals Calendars, now time.Time, to string) (evs []events.Event, state string, broken, err error) {
	cal, broken := cals.For(m.Calendar)
	var t *trigger.Trigger
	if broken == nil {
		t, broken = trigger.Restore(m.Schedule, &m.Next, m.Prev, m.Times)
	}
	if broken != nil {
		evs, err := SetTriggerError(ctx, tx, origin, map[events.Key]string{m.Key: broken.Error()}, now)
		return evs, StateError, broken, err
	}
	t.UpdateAfterMisfire(cal, now)
	schedule, err := json.Marshal(t.Definition)
	if err != nil {
		return nil, "", nil, fmt.Errorf("encoding trigger schedule: %w", err)
	}
	state = to
	if t.NextFireTime.IsZero() {
		state = StateComplete
	}
	tag, err := tx.Exec(ctx, queries.Get("UpdateMisfired"), origin.Namespace, m.Key.Group, m.Key.Name,
		NullTime(t.NextFireTime), NullTime(t.PreviousFireTime), t.TimesTriggered, schedule, m.Next, m.State, state)
	if err != nil {
		return nil, "", nil, fmt.Errorf("rescheduling misfired trigger %s: %w", m.Key, err)
	}
	if tag.RowsAffected() == 0 {
		return nil, "", nil, nil // it changed since it was read: nothing was done, nothing is logged
	}
	// The data carries the row as it now is, for replay.
	ev, err := origin.Trigger(events.TypeTriggerMisfired, m.Key, now, map[string]any{
		"trigger": m.Key, "missedFireTime": m.Next.UTC(), "nextFireTime": NullTime(t.NextFireTime),
		"instruction": cmp.Or(t.Misfire, "smart_policy"), "previousFireTime": NullTime(t.PreviousFireTime),
		"timesTriggered": t.TimesTriggered, "schedule": json.RawMessage(schedule), "state": state})
	if err != nil {
		return nil, "", nil, err
	}
	return []events.Event{ev}, state, nil, nil
}
