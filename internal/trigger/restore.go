package trigger

import (
	"fmt"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// Restore rebuilds a trigger from its stored form: the schedule as JSON (a Definition, as the
// scheduler stores it) and the fire times and count kept beside it. A nil time is "none". An
// error means the stored schedule can no longer be read.
//
// It reads with github.com/go-json-experiment/json (encoding/json/v2 as a module), as
// events.Decode does: every fire restores its trigger, and encoding/json's Unmarshal was a tenth
// of a scheduler's CPU in a burst. What the scheduler stores is its own encoding/json output as
// jsonb gives it back, which both read alike (TestRestoreReadsAsEncodingJSON).
func Restore(schedule []byte, next, prev *time.Time, timesTriggered int) (*Trigger, error) {
	var def Definition
	if err := jsonv2.Unmarshal(schedule, &def); err != nil {
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
