package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/pending"
	"github.com/agatesched/agate/internal/query"
	"github.com/agatesched/agate/internal/worker"
)

// explain asks the explain query about trigger g.name, at a time or (at zero) now.
func (e *env) explain(t *testing.T, name string, at time.Time) query.Explanation {
	t.Helper()
	body := map[string]any{"trigger": map[string]string{"group": "g", "name": name}}
	if !at.IsZero() {
		body["at"] = at.UTC().Format(time.RFC3339Nano)
	}
	r := e.ask(t, "explain", body)
	if !r.OK {
		t.Fatalf("explain %s: %+v", name, r.Error)
	}
	var x query.Explanation
	if err := json.Unmarshal(r.Result, &x); err != nil {
		t.Fatal(err)
	}
	return x
}

// has reports whether x has a reason of code.
func has(x query.Explanation, code string) bool {
	return slices.ContainsFunc(x.Reasons, func(r query.Reason) bool { return r.Code == code })
}

// reason is the reason of code in x, failing the test when there is none.
func reason(t *testing.T, x query.Explanation, code string, mentions ...string) query.Reason {
	t.Helper()
	for _, r := range x.Reasons {
		if r.Code == code {
			for _, m := range mentions {
				if !strings.Contains(r.Message, m) {
					t.Errorf("%s: the %s reason %q does not mention %q", x.Trigger, code, r.Message, m)
				}
			}
			return r
		}
	}
	t.Fatalf("%s: no %s reason in %+v", x.Trigger, code, x)
	return query.Reason{}
}

// "Why didn't it fire?" for each reason a trigger has, from the rows and the log: completed
// (and ended, its last fire done), failed, paused (by a command, by its group), blocked by a running execution whose job type no
// worker takes, excluded by its calendar, misfired, not a fire time, deleted, and never there.
func TestExplain(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.JobTypes = append(node.BuiltinJobTypes(), "boom", "nobody") })
	e.startWorker("w1", nil, map[string]worker.HandlerFunc{
		"boom": func(context.Context, worker.Job) error { return worker.Permanent(errors.New("disk full")) },
	})
	now := time.Now().UTC()
	in := func(d time.Duration) time.Time { return now.Add(d).Truncate(time.Millisecond) }
	hourly := func(name string, extra map[string]any) map[string]any {
		tr := map[string]any{"group": "g", "name": name, "cron": map[string]any{"expression": "0 0 * * * ?"}}
		for k, v := range extra {
			tr[k] = v
		}
		return tr
	}
	noon := now.AddDate(0, 0, 2).Truncate(24 * time.Hour).Add(12 * time.Hour)
	must := func(cmd string, body map[string]any) {
		t.Helper()
		if out := e.request(cmd, body); !out.OK {
			t.Fatalf("%s: %+v", cmd, out.Error)
		}
	}
	must("add_calendar", map[string]any{"id": "x-cal", "name": "holidays",
		"calendar": map[string]any{"type": "holiday", "dates": []string{noon.Format(time.DateOnly)}}})
	for _, c := range []struct {
		id  string
		job map[string]any
		trs []any
	}{
		{"x-ok", job("g", "ok", "noop", nil, nil), []any{oneShot("g", "ok", in(0))}},
		{"x-boom", job("g", "boom", "boom", nil, nil), []any{oneShot("g", "boom", in(0))}},
		{"x-late", job("g", "late", "noop", nil, nil), []any{repeating("g", "late", in(-10*time.Minute), time.Hour, -1)}},
		{"x-daily", job("g", "daily", "noop", nil, nil), []any{
			map[string]any{"group": "g", "name": "noon", "calendar": "holidays", "cron": map[string]any{"expression": "0 0 12 * * ?"}},
			hourly("hourly", nil), hourly("paused", nil), hourly("gone", nil)}},
		{"x-busy", job("g", "busy", "nobody", nil, map[string]any{"nonconcurrent": true}), []any{
			oneShot("g", "busy-now", in(0)), hourly("busy-hourly", nil)}},
		{"x-other", job("other", "j", "noop", nil, nil), []any{
			map[string]any{"group": "other", "name": "t", "cron": map[string]any{"expression": "0 0 * * * ?"}}}},
	} {
		must("schedule_job", map[string]any{"id": c.id, "job": c.job, "triggers": c.trs})
	}
	must("pause_trigger", map[string]any{"id": "x-pause", "trigger": map[string]string{"group": "g", "name": "paused"}})
	must("unschedule_trigger", map[string]any{"id": "x-unschedule", "trigger": map[string]string{"group": "g", "name": "gone"}})
	must("pause_group", map[string]any{"id": "x-pause-group", "group": "other"})

	// Fired and completed; fired and failed.
	e.waitFor(20*time.Second, "g.ok's run completes", func() bool { return has(e.explain(t, "ok", in(0)), "completed") })
	x := e.explain(t, "ok", in(0))
	reason(t, x, "fired")
	reason(t, x, "completed", "w1")
	// Now: its one fire deleted it, its JobFired saying COMPLETE.
	x = e.explain(t, "ok", time.Time{})
	if r := reason(t, x, "ended", "its last fire"); r.FireID == "" || !strings.HasPrefix(x.Summary, "It will not fire: it ended") {
		t.Errorf("g.ok now: ended reason %+v, summary %q", r, x.Summary)
	}
	reason(t, x, "completed", "w1")
	e.waitFor(20*time.Second, "g.boom's run fails", func() bool { return has(e.explain(t, "boom", in(0)), "failed") })
	reason(t, e.explain(t, "boom", in(0)), "failed", "disk full", "finally")

	// Paused by a command, now and at a later time.
	x = e.explain(t, "paused", time.Time{})
	if x.State != "PAUSED" || !strings.HasPrefix(x.Summary, "Paused") {
		t.Errorf("g.paused: state %s, summary %q", x.State, x.Summary)
	}
	reason(t, x, "paused", "x-pause")
	reason(t, e.explain(t, "paused", now.Truncate(time.Hour).Add(time.Hour)), "not_due", "paused")
	r := e.ask(t, "explain", map[string]any{"trigger": map[string]string{"group": "other", "name": "t"}})
	if err := json.Unmarshal(r.Result, &x); err != nil || !r.OK {
		t.Fatalf("explain other.t: %+v, %v", r, err)
	}
	reason(t, x, "paused", "its group other was paused", "x-pause-group")

	// Blocked by the running execution of its non-concurrent job, which no worker takes.
	e.waitFor(20*time.Second, "g.busy-hourly is BLOCKED", func() bool { return e.explain(t, "busy-hourly", time.Time{}).State == "BLOCKED" })
	x = e.explain(t, "busy-hourly", time.Time{})
	reason(t, x, "blocked", "g.busy-now")
	reason(t, x, "no_worker", "nobody")

	// Excluded by its calendar; not a fire time of its schedule.
	reason(t, e.explain(t, "noon", noon), "calendar_excluded", "holidays")
	reason(t, e.explain(t, "hourly", now.Truncate(time.Hour).Add(90*time.Minute)), "not_a_fire_time",
		now.Truncate(time.Hour).Add(2*time.Hour).Format(time.RFC3339))

	// Found late past the misfire threshold: its instruction applied instead of a fire.
	e.waitFor(20*time.Second, "g.late misfires", func() bool {
		return e.count(`select count(*) from events where sched_name = $1 and type = 'agate.trigger.misfired'`, e.ns) > 0
	})
	reason(t, e.explain(t, "late", in(-10*time.Minute)), "misfired", "smart_policy")

	// Deleted, by which command; never there.
	x = e.explain(t, "gone", time.Time{})
	if x.State != "" {
		t.Errorf("a deleted trigger has state %q", x.State)
	}
	reason(t, x, "deleted", "x-unschedule")
	if r := e.ask(t, "explain", map[string]any{"trigger": map[string]string{"group": "g", "name": "never"}}); r.OK || r.Error.Code != "not_found" {
		t.Errorf("explain of a trigger that never was: %+v", r)
	}
}

// The workers query lists the worker processes that announced themselves, with their job types
// and check-in age, and drops one killed without a word within three of its intervals; and each
// job type's consumer, as JetStream sees it.
// Explain reads the node's clock, the one commands stamp their events with: on a node whose clock
// runs ahead of the machine's (as the database-corrected clock may, by milliseconds), a pause made
// a moment ago was taken for a pause in the future, and the group's pause after the trigger's
// resume went unseen.
func TestExplainReadsTheNodeClock(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Hour) }
		c.KeepClock = true
	})
	for _, cmd := range []struct {
		name string
		body map[string]any
	}{
		{"schedule_job", map[string]any{"id": "x-job", "job": job("g", "j", "noop", nil, nil), "triggers": []any{
			map[string]any{"group": "g", "name": "t", "cron": map[string]any{"expression": "0 0 3 * * ?"}}}}},
		{"pause_trigger", map[string]any{"id": "x-pause", "trigger": map[string]string{"group": "g", "name": "t"}}},
		{"resume_trigger", map[string]any{"id": "x-resume", "trigger": map[string]string{"group": "g", "name": "t"}}},
		{"pause_group", map[string]any{"id": "x-pause-group", "group": "g"}},
	} {
		if out := e.request(cmd.name, cmd.body); !out.OK {
			t.Fatalf("%s: %+v", cmd.name, out.Error)
		}
	}
	reason(t, e.explain(t, "t", time.Time{}), "paused", "its group g was paused", "x-pause-group")
}

func TestWorkersQuery(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.JobTypes = append(node.BuiltinJobTypes(), "boom") })
	fast := func(c *worker.Config) { c.PresenceInterval = 100 * time.Millisecond }
	e.startWorker("w1", fast, nil)
	stop := e.startWorker("w2", fast, map[string]worker.HandlerFunc{"boom": func(context.Context, worker.Job) error { return nil }})
	ask := func() query.Workers {
		r := e.ask(t, "workers", map[string]any{})
		var w query.Workers
		if err := json.Unmarshal(r.Result, &w); err != nil || !r.OK {
			t.Fatalf("workers: %+v, %v", r, err)
		}
		return w
	}
	instances := func(w query.Workers) (ids []string) {
		for _, p := range w.Workers {
			ids = append(ids, p.Instance)
		}
		return ids
	}
	e.waitFor(10*time.Second, "both workers announce themselves", func() bool { return len(ask().Workers) == 2 })
	w := ask()
	if got := instances(w); !slices.Equal(got, []string{"w1", "w2"}) || !slices.Contains(w.Workers[1].JobTypes, "boom") ||
		slices.Contains(w.Workers[0].JobTypes, "boom") {
		t.Fatalf("workers %+v, want w1 (built-in types) and w2 (with boom)", w.Workers)
	}
	if !slices.ContainsFunc(w.JobTypes, func(c pending.WorkerConsumer) bool { return c.JobType == "boom" }) {
		t.Errorf("job types %+v, want boom's consumer", w.JobTypes)
	}
	stop()
	e.waitFor(10*time.Second, "w2 leaves the list once it went silent", func() bool { return slices.Equal(instances(ask()), []string{"w1"}) })
}
