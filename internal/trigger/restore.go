package trigger

import (
	"encoding/json"
	"fmt"
	"time"
)

// Restore rebuilds a trigger from its stored form: the schedule as JSON (a Definition, as the
// scheduler stores it) and the fire times and count kept beside it. A nil time is "none". An
// error means the stored schedule can no longer be read.
func Restore(schedule []byte, next, prev *time.Time, timesTriggered int) (*Trigger, error) {
	var def Definition
	if err := json.Unmarshal(schedule, &def); err != nil {
		return nil, fmt.Errorf("unreadable stored schedule: %w", err)
	}
	t := &Trigger{Definition: def, TimesTriggered: timesTriggered}
	if next != nil {
		t.NextFireTime = *next
	}
	if prev != nil {
		t.PreviousFireTime = *prev
	}
	return t, nil
}
