package replay

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/internal/events"
)

// TestSnapshotRoundTrip: a state stored as a snapshot reads back as it was.
func TestSnapshotRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 123456000, time.UTC)
	next, cal, tc, ms := now.Add(time.Minute), "holidays", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", int64(3000)
	st := NewState()
	job := events.Key{Group: "g", Name: "j"}
	st.Jobs[job] = &Job{Key: job, Type: "noop", Durable: true, TimeoutMs: &ms, Data: json.RawMessage(`{"a":1}`), Version: 2}
	trig := events.Key{Group: "g", Name: "t"}
	st.putTrigger(&Trigger{Key: trig, Job: job, Kind: "cron", Schedule: json.RawMessage(`{"cron":{"expression":"* * * * * ?"}}`),
		Start: now, Calendar: &cal, Priority: 5, Misfire: "smart_policy", Next: &next, Prev: &now, Times: 4, State: "BLOCKED",
		Partition: 7, TraceContext: &tc, Data: json.RawMessage(`{}`), Version: 1})
	id := uuid.Must(uuid.NewV7())
	st.Fired[id] = &Fired{ID: id, Trigger: trig, Job: job, Instance: "n1", FiredTime: now, SchedTime: now, Nonconcurrent: true, Priority: 5}
	st.Calendars[cal] = &Calendar{Name: cal, Calendar: json.RawMessage(`{"type":"holiday","dates":["2026-12-25"]}`), Version: 1}
	st.PausedGroups["paused"] = true

	b, err := st.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, st)
	}
}
