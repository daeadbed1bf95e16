package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/trigger"
)

// firedTimes returns the scheduled times of a trigger's fires, in order.
func (e *env) firedTimes(triggerName string) []time.Time {
	e.t.Helper()
	rows, err := e.pool.Query(e.t.Context(), `select (data->>'scheduledTime')::timestamptz from events
		where sched_name = $1 and type = $2 and data->'trigger'->>'name' = $3 order by 1`, e.ns, events.TypeJobFired, triggerName)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, at)
	}
	return out
}

// A trigger repeating faster than the fire-ahead window fires every time (funnyzpc/quartz's
// polling-window problem): 10 fires a second, none lost, each on its grid time.
func TestFastRepeatingTriggerLosesNoFire(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.FireAhead = 500 * time.Millisecond })
	e.startWorker("w1", nil, nil)
	start := time.Now().Add(500 * time.Millisecond).Truncate(time.Millisecond)
	if out := e.request("schedule_job", map[string]any{"id": "fast", "job": job("g", "fast", "noop", nil, nil),
		"triggers": []any{repeating("g", "fast", start, 100*time.Millisecond, 29)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	e.waitFor(20*time.Second, "30 fires", func() bool { return len(e.firedTimes("fast")) >= 30 })
	got := e.firedTimes("fast")
	if len(got) != 30 {
		t.Fatalf("%d fires, want 30", len(got))
	}
	for i, at := range got {
		if want := start.Add(time.Duration(i) * 100 * time.Millisecond); !at.Equal(want) {
			t.Errorf("fire %d scheduled at %s, want %s", i, at.Format(time.StampMilli), want.Format(time.StampMilli))
		}
	}
}

// A cron trigger in America/New_York fires across the spring-forward change exactly as the
// trigger package (Quartz's semantics) says, with the node's clock set just before the change.
func TestCronFiresAcrossDSTChange(t *testing.T) {
	e := newEnv(t)
	// 2026-03-08 01:59:57 EST; at 02:00 EST clocks spring forward to 03:00 EDT.
	fake := time.Date(2026, 3, 8, 6, 59, 57, 0, time.UTC)
	offset := time.Until(fake)
	clock := func() time.Time { return time.Now().Add(offset) }
	e.startNode("n1", func(c *node.Config) { c.Now = clock })
	e.startWorker("w1", nil, nil)
	const expr = "0-3 * 2,3 * * ?" // seconds 0-3 of every minute of 02:xx and 03:xx local
	if out := e.request("schedule_job", map[string]any{"id": "dst", "job": job("g", "dst", "noop", nil, nil),
		"triggers": []any{map[string]any{"group": "g", "name": "dst", "startAt": fake.Format(time.RFC3339),
			"cron": map[string]any{"expression": expr, "timeZone": "America/New_York"}}}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	def := trigger.Definition{Cron: &trigger.CronSchedule{Expression: expr, TimeZone: "America/New_York"}, StartAt: &fake}
	tr, err := trigger.New(def, fake, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := tr.FireTimes(fake.Add(-time.Second), 4, nil)
	if len(want) != 4 || want[0].Before(fake) {
		t.Fatalf("test bug: expected fire times %v", want)
	}
	e.waitFor(30*time.Second, "4 fires across the change", func() bool { return len(e.firedTimes("dst")) >= 4 })
	got := e.firedTimes("dst")[:4]
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("fire %d at %s, want %s", i, got[i].Format(time.RFC3339), want[i].Format(time.RFC3339))
		}
	}
	ny, _ := time.LoadLocation("America/New_York")
	// 02:xx does not exist that day: the first fire is 03:00:00 EDT, three seconds later.
	if first := got[0].In(ny); first.Hour() != 3 || first.Minute() != 0 || first.Second() != 0 {
		t.Errorf("first fire %s, want 03:00:00 EDT", first.Format(time.RFC3339))
	}
	t.Logf("fires: %v", fmt.Sprint(got))
}
