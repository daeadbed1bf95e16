package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
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
	e.startNode("n1", func(c *node.Config) { c.Now, c.KeepClock = clock, true }) // a simulated date
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

// Calendars: a trigger that names one skips its excluded days; a calendar in use cannot be
// deleted; an unknown one is reported.
func TestCalendarsExcludeTimes(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	now := time.Now().UTC()
	today, tomorrow := now.Format(time.DateOnly), now.AddDate(0, 0, 1).Format(time.DateOnly)
	if out := e.request("add_calendar", map[string]any{"id": "cal", "name": "holidays",
		"calendar": map[string]any{"type": "holiday", "dates": []string{today, tomorrow}}}); !out.OK {
		t.Fatalf("add_calendar: %+v", out.Error)
	}
	if out := e.request("add_calendar", map[string]any{"id": "cal-bad", "name": "bad",
		"calendar": map[string]any{"type": "holiday", "dates": []string{"31 Dec"}}}); out.OK || !strings.HasPrefix(out.Error.Field, "calendar.dates") {
		t.Errorf("a bad calendar was answered %+v, want an invalid_argument naming calendar.dates", out.Error)
	}
	trig := repeating("g", "daily", now, time.Hour, -1)
	trig["calendar"] = "holidays"
	out := e.request("schedule_job", map[string]any{"id": "uses-cal", "job": job("g", "j", "noop", nil, nil), "triggers": []any{trig}})
	if !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	var next time.Time
	if err := e.pool.QueryRow(t.Context(), `select next_fire_time from triggers where sched_name = $1`, e.ns).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if dayAfter := time.Date(now.Year(), now.Month(), now.Day()+2, 0, 0, 0, 0, time.UTC); next.Before(dayAfter) {
		t.Errorf("next fire %s falls on an excluded day (want ≥ %s)", next, dayAfter)
	}
	trig2 := oneShot("g", "x", now.Add(time.Hour))
	trig2["calendar"] = "nope"
	if out := e.request("schedule_job", map[string]any{"id": "no-cal", "job": job("g", "k", "noop", nil, nil), "triggers": []any{trig2}}); out.OK || out.Error.Code != "not_found" {
		t.Errorf("unknown calendar answered %+v, want not_found", out.Error)
	}
	if out := e.request("delete_calendar", map[string]any{"id": "del1", "name": "holidays"}); out.OK || out.Error.Code != "failed_precondition" {
		t.Errorf("deleting a calendar in use answered %+v, want failed_precondition", out.Error)
	}
	if out := e.request("unschedule_trigger", map[string]any{"id": "unsch", "trigger": map[string]any{"group": "g", "name": "daily"}}); !out.OK {
		t.Fatalf("unschedule_trigger: %+v", out.Error)
	}
	if out := e.request("delete_calendar", map[string]any{"id": "del2", "name": "holidays"}); !out.OK {
		t.Errorf("delete_calendar: %+v", out.Error)
	}
	if n := e.count(`select count(*) from job_details where sched_name = $1`, e.ns); n != 0 {
		t.Errorf("the job left without triggers was not deleted (%d jobs)", n)
	}
}

// Every trigger kind of Quartz is accepted by schedule_job and stored with the first fire time
// the trigger package computes.
func TestAllTriggerKindsAreAccepted(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	kinds := map[string]map[string]any{
		"simple":            {"simple": map[string]any{"interval": "PT10S", "repeatCount": 3}},
		"cron":              {"cron": map[string]any{"expression": "0 15 10 ? * 6L", "timeZone": "Europe/Paris"}},
		"calendarInterval":  {"calendarInterval": map[string]any{"interval": 1, "unit": "month", "timeZone": "America/New_York"}},
		"dailyTimeInterval": {"dailyTimeInterval": map[string]any{"startTimeOfDay": "09:00:00", "endTimeOfDay": "17:00:00", "daysOfWeek": []string{"MON", "FRI"}, "interval": 30, "unit": "minute"}},
	}
	for name, sched := range kinds {
		trig := map[string]any{"group": "g", "name": name, "startAt": start.Format(time.RFC3339)}
		for k, v := range sched {
			trig[k] = v
		}
		out := e.request("schedule_job", map[string]any{"id": name, "job": job("g", name, "noop", nil, nil), "triggers": []any{trig}})
		if !out.OK {
			t.Errorf("%s: %+v", name, out.Error)
			continue
		}
		var def trigger.Definition
		if err := json.Unmarshal(mustJSON(t, trig), &def); err != nil {
			t.Fatal(err)
		}
		tr, err := trigger.New(def, time.Now(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var next time.Time
		var kind string
		if err := e.pool.QueryRow(t.Context(), `select next_fire_time, kind from triggers where sched_name = $1 and trigger_name = $2`,
			e.ns, name).Scan(&next, &kind); err != nil {
			t.Fatal(err)
		}
		if !next.Equal(tr.NextFireTime) {
			t.Errorf("%s (%s): stored next fire %s, want %s", name, kind, next, tr.NextFireTime)
		}
	}
}

// Quartz needs every node's clock to agree: a node whose clock runs ahead fires early. Agate
// measures each node's offset from the database clock at check-in and fires by the database
// clock, so a node 5 s ahead still fires on time, not 5 s early.
func TestNodeWithClockAheadFiresOnTime(t *testing.T) {
	e := newEnv(t)
	signals := &node.TestSignals{}
	signals.Recovery.Pass.Init()
	const ahead = 5 * time.Second
	e.startNode("n1", func(c *node.Config) {
		c.Now = func() time.Time { return time.Now().Add(ahead) }
		c.TestSignals = signals
	})
	e.startWorker("w1", nil, nil)
	if res := signals.Recovery.Pass.Wait(t); res.ClockOffset > -ahead+time.Second || res.ClockOffset < -ahead-time.Second {
		t.Fatalf("measured offset %s, want about %s", res.ClockOffset, -ahead)
	}
	at := time.Now().Add(2 * time.Second)
	if out := e.request("schedule_job", map[string]any{"id": "on-time", "job": job("g", "j", "noop", nil, nil),
		"triggers": []any{oneShot("g", "t", at)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	e.waitCount(20*time.Second, "the completion", 1, `select count(*) from events where sched_name = $1 and type = $2`,
		e.ns, events.TypeJobCompleted)
	var started time.Time
	if err := e.pool.QueryRow(t.Context(), `select (data->>'startedTime')::timestamptz from events where sched_name = $1 and type = $2`,
		e.ns, events.TypeJobCompleted).Scan(&started); err != nil {
		t.Fatal(err)
	}
	// The worker's clock is the real one: the job must not start before its time.
	if early := at.Sub(started); early > 50*time.Millisecond {
		t.Fatalf("the job started %s before its time", early)
	}
}

// A one-shot's fire deletes its trigger, but its non-durable job stays while the execution runs:
// unscheduling the job's last other trigger meanwhile leaves it (Quartz keeps it until its
// COMPLETE trigger's execution ends), and the end of the execution deletes it.
func TestAJobOutlivesItsLastTriggerUntilItsExecutionEnds(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	if out := e.request("schedule_job", map[string]any{"id": "s1", "job": job("g", "j", "noop", nil, nil),
		"triggers": []any{oneShot("g", "once", time.Now()), repeating("g", "later", time.Now().Add(time.Hour), time.Hour, -1)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	// No worker yet: the one-shot's execution stays in flight.
	e.waitCount(10*time.Second, "the one-shot's fire", 1, `select count(*) from fired_triggers where sched_name = $1 and state = 'EXECUTING'`, e.ns)
	if n := e.count(`select count(*) from triggers where sched_name = $1 and trigger_name = 'once'`, e.ns); n != 0 {
		t.Fatal("the one-shot's trigger is there after its fire")
	}
	if out := e.request("unschedule_trigger", map[string]any{"id": "u1", "trigger": map[string]any{"group": "g", "name": "later"}}); !out.OK {
		t.Fatalf("unschedule_trigger: %+v", out.Error)
	}
	if n := e.count(`select count(*) from job_details where sched_name = $1`, e.ns); n != 1 {
		t.Fatal("unscheduling the job's last trigger deleted it while an execution of it was in flight")
	}
	e.startWorker("w1", nil, nil)
	e.waitCount(10*time.Second, "the JobDeleted of the execution's end", 1,
		`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobDeleted)
	if n := e.count(`select count(*) from job_details where sched_name = $1`, e.ns); n != 0 {
		t.Error("the job is there after its execution ended")
	}
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted); n != 1 {
		t.Errorf("%d JobCompleted logged, want 1", n)
	}
	e.checkReplay()
}
