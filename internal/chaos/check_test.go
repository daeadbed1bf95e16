package chaos

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/replay"
)

// row builds an event row as the events table holds it.
func row(t *testing.T, seq int64, typ, source string, at time.Time, data any) logRow {
	t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return logRow{Seq: seq, Type: typ, Source: "agate/chaos/" + source, Time: at, Data: b}
}

// TestCheckCountsEachViolation feeds the checker a synthetic log holding one lost fire, one
// double fire, one overlap of a non-concurrent job, one fire without a terminal event, and one
// duplicate execution, and asserts that each is counted (and nothing else).
func TestCheckCountsEachViolation(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	job := func(name string) map[string]string {
		return map[string]string{"group": "g", "name": name, "type": "noop"}
	}
	trig := func(name string) map[string]string { return map[string]string{"group": "g", "name": name} }
	var seq int64
	var rows []logRow
	add := func(typ, source string, at time.Time, data any) {
		seq++
		rows = append(rows, row(t, seq, typ, source, at, data))
	}
	fired := func(id, job0, trig0 string, sched time.Time, nonconcurrent bool) {
		add(events.TypeJobFired, "s1-1", sched.Add(5*time.Millisecond), map[string]any{"fireId": id, "job": job(job0),
			"trigger": trig(trig0), "scheduledTime": sched, "nonconcurrent": nonconcurrent})
	}
	done := func(id, job0, trig0 string, start, end time.Time, failed, final bool) {
		typ := events.TypeJobCompleted
		d := map[string]any{"fireId": id, "job": job(job0), "trigger": trig(trig0), "worker": "w1-1",
			"startedTime": start, "finishedTime": end, "attempt": 1}
		if failed {
			typ = events.TypeJobFailed
			d["error"] = map[string]any{"message": "x", "retryable": true, "final": final}
		}
		add(typ, "w1-1", end, d)
	}
	for _, name := range []string{"rep", "nc1", "nc2"} {
		add(events.TypeTriggerScheduled, "s1-1", t0, map[string]any{"trigger": trig(name), "commandId": "c1"})
	}
	plan := []PlannedTrigger{
		{Key: "g.rep", CommandID: "c1", Accepted: true, Times: []time.Time{ms(0), ms(100), ms(200), ms(300), ms(400)}},
		{Key: "g.nc1", CommandID: "c1", Accepted: true, Times: []time.Time{ms(0), ms(1000)}},
		{Key: "g.nc2", CommandID: "c1", Accepted: true, Times: []time.Time{ms(500)}},
		// Accepted, but the log never scheduled it.
		{Key: "g.ghost", CommandID: "c2", Accepted: true, Times: []time.Time{ms(0)}},
	}

	// g.rep: @0 fine; @100 fired twice (two fireIds); @200 lost; @300 fired, never ended;
	// @400 completed twice (a duplicate execution), after a worker kill.
	fired("f0", "rep", "rep", ms(0), false)
	done("f0", "rep", "rep", ms(10), ms(20), false, false)
	fired("f1a", "rep", "rep", ms(100), false)
	fired("f1b", "rep", "rep", ms(100), false)
	done("f1a", "rep", "rep", ms(110), ms(120), false, false)
	done("f1b", "rep", "rep", ms(111), ms(121), false, false)
	fired("f3", "rep", "rep", ms(300), false)
	done("f3", "rep", "rep", ms(310), ms(320), true, false) // a retryable failure is not terminal
	fired("f4", "rep", "rep", ms(400), false)
	done("f4", "rep", "rep", ms(410), ms(420), false, false)
	done("f4", "rep", "rep", ms(5410), ms(5420), false, false)
	// A fire at a time the schedule does not have.
	fired("fx", "rep", "rep", ms(450), false)
	done("fx", "rep", "rep", ms(460), ms(470), true, true) // a final failure is terminal

	// Non-concurrent job nc: nc1@0 runs [0, 600]; nc2@500 runs [550, 850]: an overlap.
	// nc1@1000 runs [1000, 1300], and a duplicate of it [1200, 1500] overlaps nothing else.
	fired("n1", "nc", "nc1", ms(0), true)
	fired("n2", "nc", "nc2", ms(500), true)
	done("n1", "nc", "nc1", ms(0), ms(600), false, false)
	done("n2", "nc", "nc2", ms(550), ms(850), false, false)
	fired("n3", "nc", "nc1", ms(1000), true)
	done("n3", "nc", "nc1", ms(1000), ms(1300), false, false)
	done("n3", "nc", "nc1", ms(1200), ms(1500), false, false)

	// Releases: s2-1 was killed at +1s; its claims were released at +10.5s.
	add(events.TypeTriggerReleased, "s1-1", ms(10500), map[string]any{"trigger": trig("rep"), "reason": "node failed", "nodes": []string{"s2-1"}})
	// s3-1 was paused at +6s but came back in time; the release naming it belongs to its kill at +30s.
	add(events.TypeTriggerReleased, "s1-1", ms(39000), map[string]any{"trigger": trig("rep"), "reason": "node failed", "nodes": []string{"s3-1"}})

	lg, err := parseLog(rows)
	if err != nil {
		t.Fatal(err)
	}
	faults := []FaultRecord{
		{At: ms(1000), Kind: FaultKill, Role: roleScheduler, Target: "s2-1"},
		{At: ms(1100), Kind: FaultKill, Role: roleWorker, Target: "w1-1"},
		{At: ms(6000), Kind: FaultStop, Role: roleScheduler, Target: "s3-1"},
		{At: ms(30000), Kind: FaultKill, Role: roleScheduler, Target: "s3-1"},
	}
	r := Check(lg, plan, faults)

	check := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: got %d, want %d", what, got, want)
		}
	}
	check("due", r.Due, 8)
	check("fired", r.Fired, 7)
	check("lateness of non-concurrent jobs' fires", len(r.LatenessNonconcurrent), 3)
	check("lateness of the others", len(r.LatenessOthers), 4)
	check("lateness", len(r.Lateness), len(r.LatenessNonconcurrent)+len(r.LatenessOthers))
	check("lost", len(r.Lost), 1)
	check("doubles", len(r.Doubles), 1)
	check("unexpected", len(r.Unexpected), 1)
	check("overlaps", len(r.Overlaps), 1)
	check("no terminal", len(r.NoTerminal), 1)
	check("lost commands", len(r.LostCommands), 1)
	check("duplicates", len(r.Duplicates), 2) // f4 again, n3 again
	check("executions", r.Executions, 11)
	check("failovers", len(r.Failovers), 3)
	if len(r.Lost) == 1 && r.Lost[0] != keyOf("g.rep", ms(200)) {
		t.Errorf("lost %v, want g.rep@+200ms", r.Lost[0])
	}
	if len(r.Doubles) == 1 && r.Doubles[0] != keyOf("g.rep", ms(100)) {
		t.Errorf("double %v, want g.rep@+100ms", r.Doubles[0])
	}
	if len(r.NoTerminal) == 1 && r.NoTerminal[0] != "f3" {
		t.Errorf("no terminal event: %v, want f3", r.NoTerminal)
	}
	if len(r.Overlaps) == 1 && !strings.Contains(r.Overlaps[0], "n1") || !strings.Contains(strings.Join(r.Overlaps, ""), "n2") {
		t.Errorf("overlap %v, want n1 / n2", r.Overlaps)
	}
	for _, d := range r.Duplicates {
		if d.Fault == nil || d.Fault.Target != map[string]string{"f4": "w1-1", "n3": "w1-1"}[d.FireID] {
			t.Errorf("duplicate of %s attributed to %+v, want the kill of w1-1", d.FireID, d.Fault)
		}
	}
	for _, f := range r.Failovers {
		switch f.Fault.Target {
		case "s2-1":
			if !f.Released || f.After != 9500*time.Millisecond {
				t.Errorf("failover of s2-1: %+v, want released after 9.5s", f)
			}
		case "s3-1":
			if want := f.Fault.Kind == FaultKill; f.Released != want || want && f.After != 9*time.Second {
				t.Errorf("failover of s3-1 (%s): %+v; only its kill is released, after 9s", f.Fault.Kind, f)
			}
		}
	}
	if !r.Failed() {
		t.Error("Failed() is false")
	}

	var out bytes.Buffer
	WriteReport(&out, &Report{Config: Config{Seed: 42, CheckinInterval: time.Second}, Results: r, Faults: faults})
	for _, want := range []string{"seed 42", "--seed 42", "LOST fires", "g.rep@12:00:00.200", "DOUBLE fires", "OVERLAPPING",
		"WITHOUT a terminal event", "FAILED:", "p50 9.5s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCheckCleanRun: a log where everything fired once and ended passes.
func TestCheckCleanRun(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	lg := Log{Scheduled: map[string]string{"g.a": "c"}}
	var plan []PlannedTrigger
	p := PlannedTrigger{Key: "g.a", CommandID: "c", Accepted: true}
	for i := range 10 {
		at := t0.Add(time.Duration(i) * 300 * time.Millisecond)
		p.Times = append(p.Times, at)
		id := string(rune('a' + i))
		lg.Fires = append(lg.Fires, Fire{Seq: int64(2 * i), FireID: id, Job: "g.j", Trigger: "g.a", ScheduledTime: at, Time: at, Nonconcurrent: true})
		lg.Executions = append(lg.Executions, Execution{Seq: int64(2*i + 1), FireID: id, Job: "g.j", Trigger: "g.a",
			Started: at, Finished: at.Add(299 * time.Millisecond)})
	}
	plan = append(plan, p)
	r := Check(lg, plan, nil)
	if r.Failed() || r.Due != 10 || r.Fired != 10 {
		t.Errorf("clean run: due %d fired %d violations %v", r.Due, r.Fired, r.Violations())
	}
}

func TestPlanFaultsCoversEveryKindAndIsSeeded(t *testing.T) {
	plan := func(seed uint64) []plannedFault {
		return planFaults(newRand(seed, 2), 5*time.Second, 90*time.Second, 4*time.Second, 11*time.Second)
	}
	a, b := plan(9), plan(9)
	if len(a) < 20 {
		t.Fatalf("%d faults in 90s every 4s, want at least 20", len(a))
	}
	kinds := map[string]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different plans at %d: %+v / %+v", i, a[i], b[i])
		}
		kinds[string(a[i].Kind)+a[i].Role] = true
	}
	if len(kinds) != 8 {
		t.Errorf("plan covers %d kinds of fault, want 8: %v", len(kinds), kinds)
	}
}

// A process that exited on its own fails the run, even with every fire accounted for: the
// supervisor restarts it, which would otherwise hide the crash.
func TestReportFailsOnAProcessThatExitedOnItsOwn(t *testing.T) {
	rep := &Report{Results: &Results{Due: 1, Fired: 1}}
	if rep.Failed() {
		t.Fatalf("a clean run failed: %v", rep.Violations())
	}
	rep.Unexpected = []string{"s1-1 exited on its own (exit status 1)"}
	if !rep.Failed() || len(rep.Violations()) != 1 {
		t.Fatalf("a run with a crashed process: failed %v, violations %v; want failed, one violation", rep.Failed(), rep.Violations())
	}
}

// A replay of the log that differs from the tables, or cannot apply the log, fails the run, and
// the report names what differs.
func TestReportFailsOnAReplayThatDiffers(t *testing.T) {
	ok := ReplayCheck{From: "from its start"}
	rep := &Report{Results: &Results{Due: 1, Fired: 1}, Replays: []ReplayCheck{ok}}
	if rep.Failed() {
		t.Fatalf("a run whose replay is equal failed: %v", rep.Violations())
	}
	differs := ReplayCheck{From: "from its latest snapshot", Report: replay.Report{Differences: []replay.Difference{
		{Table: "triggers", Key: "g.t", Column: "state", Live: "WAITING", Replayed: "PAUSED"}}}}
	broken := ReplayCheck{From: "from its start", Err: errors.New("replay: event 7 (agate.job.fired): trigger g.u does not exist at this point of the log")}
	rep.Replays = []ReplayCheck{differs, broken}
	if !rep.Failed() || len(rep.Violations()) != 2 {
		t.Fatalf("a run whose replays differ and fail: failed %v, violations %v; want failed, two violations", rep.Failed(), rep.Violations())
	}
	var out bytes.Buffer
	WriteReport(&out, rep)
	for _, want := range []string{`triggers g.t: state: live "WAITING", replayed "PAUSED"`, "trigger g.u does not exist", "FAIL: 1 differences"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}
