package command

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
)

// JobAdded's and TriggerScheduled's data are written from structs; the bytes are those of the
// maps they were written from before, which the log already holds.
func TestEventDataIsWhatTheMapsWrote(t *testing.T) {
	cal, end := "holidays", time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	job := JobSpec{Group: "g", Name: "j", Type: "noop", Data: json.RawMessage(`{"k":1}`), Durable: true}
	ref, key := events.JobRef{Group: "g", Name: "j", Type: "noop"}, events.Key{Group: "g", Name: "t"}
	r := triggerRow{Kind: "cron", Schedule: []byte(`{"cron":{"expression":"0 0 * * * ?"}}`), Start: time.Now(),
		End: &end, Calendar: &cal, Priority: 5, Misfire: "smart_policy", Next: time.Now().Add(time.Hour),
		State: "WAITING", Data: json.RawMessage(`{"x":"y"}`), Version: 3}
	for name, c := range map[string]struct{ got, want any }{
		"JobAdded": {jobAddedData{CommandID: "c1", Job: job, Replaced: true},
			map[string]any{"job": job, "replaced": true, "commandId": "c1"}},
		"TriggerScheduled": {events.TriggerScheduled{Calendar: r.Calendar, CommandID: "c1", Data: r.Data, EndTime: r.End, Job: ref,
			Kind: r.Kind, Misfire: r.Misfire, NextFireTime: &r.Next, Priority: r.Priority, Schedule: r.Schedule,
			StartTime: r.Start.UTC(), State: r.State, Trigger: key, Version: r.Version},
			map[string]any{"trigger": key, "job": ref, "commandId": "c1", "nextFireTime": r.Next,
				"state": r.State, "schedule": json.RawMessage(r.Schedule), "kind": r.Kind, "startTime": r.Start.UTC(),
				"endTime": r.End, "calendar": r.Calendar, "priority": r.Priority, "misfireInstruction": r.Misfire,
				"data": r.Data, "version": r.Version}},
		"TriggerScheduled, nothing optional": {events.TriggerScheduled{Trigger: key, Job: ref, Schedule: r.Schedule, NextFireTime: &time.Time{}},
			map[string]any{"trigger": key, "job": ref, "commandId": "", "nextFireTime": time.Time{},
				"state": "", "schedule": json.RawMessage(r.Schedule), "kind": "", "startTime": time.Time{},
				"endTime": (*time.Time)(nil), "calendar": (*string)(nil), "priority": 0, "misfireInstruction": "",
				"data": json.RawMessage(nil), "version": int64(0)}},
	} {
		got, err := json.Marshal(c.got)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(c.want)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}
