package node_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/worker"
)

// Two nodes and two workers on one database and one JetStream: every (trigger, scheduled time)
// fires exactly once and completes, each JobFired is published once (by the node that fired it:
// the outbox sweep passes over what the nodes vouched for), nothing is left behind, and the log
// tells the whole story.
func TestTwoNodesFireEverythingOnce(t *testing.T) {
	lockModes(t, func(t *testing.T, mode func(*node.Config)) {
		e := newEnv(t)
		// The sweep would publish a row nobody vouched for after 10 s: long enough for a check-in
		// (every second) to vouch for every fire even on a loaded machine.
		sweep := func(c *node.Config) { mode(c); c.SweepDelay = 10 * time.Second }
		e.startNode("n1", sweep)
		e.startNode("n2", sweep)
		e.startWorker("w1", nil, nil)
		e.startWorker("w2", nil, nil)
		// Every publish of a JobFired reaches core subscribers, also a copy JetStream drops; a
		// message may hold a batch of them.
		var pubMu sync.Mutex
		publishes := map[string]int{} // event id → publishes
		sub, err := e.nc.Subscribe(events.Subjects(e.ns).All("fired"), func(m *nats.Msg) {
			bodies, err := events.Bodies(m.Header, m.Data)
			if err != nil {
				t.Errorf("unreadable message on %s: %v", m.Subject, err)
				return
			}
			pubMu.Lock()
			defer pubMu.Unlock()
			for _, b := range bodies {
				var f events.JobFired
				env, err := events.Decode(b, &f)
				if err != nil {
					t.Errorf("unreadable JobFired on %s: %v", m.Subject, err)
					continue
				}
				publishes[env.ID]++
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()

		t0 := time.Now().Add(4 * time.Second).Truncate(time.Millisecond)
		expected := map[string]bool{} // "<trigger>@<scheduled time>"
		// 1,000 one-shot triggers due within a 2 s window: 20 jobs × 50 triggers.
		for j := range 20 {
			var trigs []map[string]any
			for i := range 50 {
				at := t0.Add(time.Duration(j*50+i) * 2 * time.Millisecond)
				name := fmt.Sprintf("once-%02d-%02d", j, i)
				trigs = append(trigs, oneShot("burst", name, at))
				expected["burst."+name+"@"+at.UTC().Format(time.RFC3339Nano)] = true
			}
			out := e.request("schedule_job", map[string]any{"id": fmt.Sprintf("burst-%d", j),
				"job": job("burst", fmt.Sprintf("job-%02d", j), "noop", nil, nil), "triggers": trigs})
			if !out.OK {
				t.Fatalf("schedule_job burst-%d: %+v", j, out.Error)
			}
		}
		// 20 triggers repeating every 200 ms for 5 s (25 fires each).
		for j := range 20 {
			name := fmt.Sprintf("rep-%02d", j)
			out := e.request("schedule_job", map[string]any{"id": "rep-" + name,
				"job":      job("repeat", name, "noop", nil, nil),
				"triggers": []any{repeating("repeat", name, t0, 200*time.Millisecond, 24)}})
			if !out.OK {
				t.Fatalf("schedule_job %s: %+v", name, out.Error)
			}
			for k := range 25 {
				expected["repeat."+name+"@"+t0.Add(time.Duration(k)*200*time.Millisecond).UTC().Format(time.RFC3339Nano)] = true
			}
		}
		if len(expected) != 1500 {
			t.Fatalf("test bug: %d expected fires", len(expected))
		}

		e.waitFor(60*time.Second, "1,500 completions in the log", func() bool {
			return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) >= 1500
		})

		rows, err := e.pool.Query(t.Context(), `
			select data->'trigger'->>'group' || '.' || (data->'trigger'->>'name'), (data->>'scheduledTime')::timestamptz, count(*)
			from events where sched_name = $1 and type = $2 group by 1, 2`, e.ns, events.TypeJobFired)
		if err != nil {
			t.Fatal(err)
		}
		fired := map[string]bool{}
		for rows.Next() {
			var trig string
			var at time.Time
			var n int
			if err := rows.Scan(&trig, &at, &n); err != nil {
				t.Fatal(err)
			}
			key := trig + "@" + at.UTC().Format(time.RFC3339Nano)
			if n != 1 {
				t.Errorf("%s fired %d times", key, n)
			}
			if !expected[key] {
				t.Errorf("unexpected fire %s", key)
			}
			fired[key] = true
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		for k := range expected {
			if !fired[k] {
				t.Errorf("fire %s is missing", k)
			}
		}
		if n := e.count(`select count(distinct data->>'fireId') from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted); n != 1500 {
			t.Errorf("%d distinct fires completed, want 1500", n)
		}
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted); n != 1500 {
			t.Errorf("%d completion events, want 1500 (one per fire)", n)
		}
		if n := e.count(`
			select count(*) from events c where c.sched_name = $1 and c.type = $2 and not exists (
				select 1 from events f where f.sched_name = $1 and f.type = $3 and f.data->>'fireId' = c.data->>'fireId')`,
			e.ns, events.TypeJobCompleted, events.TypeJobFired); n != 0 {
			t.Errorf("%d completions without a fire", n)
		}
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeTriggerScheduled); n != 1020 {
			t.Errorf("%d TriggerScheduled events, want 1020", n)
		}
		e.waitFor(10*time.Second, "fired rows, finished triggers and jobs to be cleaned up", func() bool {
			return e.count(`select count(*) from fired_triggers where sched_name = $1`, e.ns) == 0 &&
				e.count(`select count(*) from triggers where sched_name = $1`, e.ns) == 0 &&
				e.count(`select count(*) from job_details where sched_name = $1`, e.ns) == 0
		})
		var late []time.Duration
		lrows, err := e.pool.Query(t.Context(), `select (data->>'startedTime')::timestamptz - (data->>'scheduledTime')::timestamptz
			from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
		if err != nil {
			t.Fatal(err)
		}
		for lrows.Next() {
			var d time.Duration
			if err := lrows.Scan(&d); err != nil {
				t.Fatal(err)
			}
			late = append(late, d)
		}
		slices.Sort(late)
		t.Logf("lateness p50 %v p99 %v max %v", late[len(late)/2], late[len(late)*99/100], late[len(late)-1])

		e.waitFor(30*time.Second, "the outbox sweep to pass every JobFired", func() bool {
			return e.count(`select count(*) from events e where e.sched_name = $1 and e.type = $2 and not exists (
				select 1 from outbox_cursor c where c.sched_name = $1 and (e.xid, e.seq) <= (c.last_xid, c.last_seq))`,
				e.ns, events.TypeJobFired) == 0
		})
		// Flush: whatever the server delivered before now has reached the subscription.
		if err := e.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		e.waitFor(5*time.Second, "the subscription to see 1,500 JobFired", func() bool {
			pubMu.Lock()
			defer pubMu.Unlock()
			return len(publishes) >= 1500
		})
		pubMu.Lock()
		defer pubMu.Unlock()
		if len(publishes) != 1500 {
			t.Errorf("%d JobFired events were published, want 1500", len(publishes))
		}
		for id, n := range publishes {
			if n != 1 {
				t.Errorf("JobFired %s was published %d times, want once", id, n)
			}
		}
	})
}

// A non-concurrent job fired every 100 ms that runs 500 ms never overlaps itself; its trigger is
// BLOCKED while it runs and released to WAITING when it completes.
func TestNonconcurrentJobNeverOverlaps(t *testing.T) {
	lockModes(t, func(t *testing.T, mode func(*node.Config)) {
		e := newEnv(t)
		e.startNode("n1", mode)
		e.startWorker("w1", nil, nil)
		e.startWorker("w2", nil, nil)
		out := e.request("schedule_job", map[string]any{"id": "nc",
			"job":      job("g", "slow", "sleep", map[string]any{"duration": "500ms"}, map[string]any{"nonconcurrent": true}),
			"triggers": []any{repeating("g", "fast", time.Now(), 100*time.Millisecond, -1)}})
		if !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
		sawBlocked := false
		e.waitFor(20*time.Second, "5 completed runs", func() bool {
			var state string
			if err := e.pool.QueryRow(t.Context(), `select state from triggers where sched_name = $1`, e.ns).Scan(&state); err == nil && state == "BLOCKED" {
				sawBlocked = true
			}
			return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) >= 5
		})
		if !sawBlocked {
			t.Error("the trigger was never seen BLOCKED")
		}
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2 and data->>'reason' = 'job completed'`,
			e.ns, events.TypeTriggerReleased); n < 4 {
			t.Errorf("%d BLOCKED → WAITING releases logged, want ≥ 4", n)
		}
		rows, err := e.pool.Query(t.Context(), `select (data->>'startedTime')::timestamptz, (data->>'finishedTime')::timestamptz
			from events where sched_name = $1 and type = $2 order by 1`, e.ns, events.TypeJobCompleted)
		if err != nil {
			t.Fatal(err)
		}
		var prevEnd time.Time
		runs := 0
		for rows.Next() {
			var start, end time.Time
			if err := rows.Scan(&start, &end); err != nil {
				t.Fatal(err)
			}
			if start.Before(prevEnd) {
				t.Errorf("run starting %s overlaps the previous one, which ended %s", start.Format(time.StampMilli), prevEnd.Format(time.StampMilli))
			}
			prevEnd = end
			runs++
		}
		if runs < 5 {
			t.Errorf("%d runs", runs)
		}
		if n := e.count(`select count(*) from fired_triggers where sched_name = $1 and state = 'EXECUTING'`, e.ns); n > 1 {
			t.Errorf("%d executions in flight", n)
		}
	})
}

// Bad input is rejected with a reason, recorded, and changes nothing; the consumer keeps going.
func TestBadCommandsAreRejected(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", nil)
	valid := func(id string) map[string]any {
		return map[string]any{"id": id, "job": job("g", "j-"+id, "noop", nil, nil),
			"triggers": []any{oneShot("g", "t-"+id, time.Now().Add(time.Hour))}}
	}
	withCron := func(expr string) map[string]any {
		c := valid("cron")
		c["triggers"] = []any{map[string]any{"group": "g", "name": "c", "cron": map[string]any{"expression": expr}}}
		return c
	}
	unknownField := valid("unknown-field")
	unknownField["color"] = "blue"
	noID := valid("x")
	delete(noID, "id")
	unknownType := valid("unknown-type")
	unknownType["job"] = job("g", "j", "teleport", nil, nil)
	huge := []byte(`{"id":"huge","pad":"` + strings.Repeat("x", 10<<20) + `"}`)

	cases := []struct {
		name, cmd string
		body      any
		want      []string // words the message must contain
	}{
		{"not JSON", "schedule_job", []byte("{not json"), []string{"not valid JSON"}},
		{"unknown command", "launch_rocket", valid("rocket"), []string{"unknown command", "launch_rocket"}},
		{"unknown field", "schedule_job", unknownField, []string{"color"}},
		{"missing id", "schedule_job", noID, []string{"id"}},
		{"unknown job type", "schedule_job", unknownType, []string{"unknown job type", "teleport"}},
		{"bad cron", "schedule_job", withCron("0 0 25 * * ?"), []string{"hour"}},
		{"10 MB body", "schedule_job", huge, []string{"limit"}},
		// PostgreSQL's text and jsonb cannot hold NUL: such bodies used to loop forever.
		{"trailing NUL byte", "schedule_job", []byte(`{"id":"poison-2"}` + "\x00"), []string{"not valid JSON"}},
		{"NUL in a string", "schedule_job", []byte(`{"id":"poison-3","job":{"group":"g\u0000","name":"x","type":"noop"},"triggers":[]}`),
			[]string{"NUL"}},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			out := e.request(tc.cmd, tc.body)
			if out.OK || out.Error == nil {
				t.Fatalf("accepted: %+v", out)
			}
			if out.Error.Code != command.CodeInvalidArgument {
				t.Errorf("code %s, want invalid_argument", out.Error.Code)
			}
			msg := strings.ToLower(out.Error.Field + " " + out.Error.Message)
			for _, w := range tc.want {
				if !strings.Contains(msg, strings.ToLower(w)) {
					t.Errorf("message %q does not mention %q", out.Error.Field+": "+out.Error.Message, w)
				}
			}
		})
	}
	// The same inputs on the durable cmd subject become CommandRejected events.
	for _, tc := range cases {
		data, ok := tc.body.([]byte)
		if ok {
			data = bytes.Replace(data, []byte(`"id":"`), []byte(`"id":"cmd-`), 1)
		} else {
			// A fresh id: an id already answered on the api path would be answered as before,
			// without a new event.
			m := maps.Clone(tc.body.(map[string]any))
			if id, ok := m["id"].(string); ok {
				m["id"] = "cmd-" + id
			}
			data = mustJSON(t, m)
		}
		if _, err := e.js.Publish(t.Context(), events.Subjects(e.ns).Command(tc.cmd), data); err != nil {
			t.Fatalf("publishing %s: %v", tc.name, err)
		}
	}
	e.waitFor(20*time.Second, "a CommandRejected event per bad command on both paths", func() bool {
		return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeCommandRejected) >= 2*len(cases)
	})
	if n := e.count(`select count(*) from triggers where sched_name = $1`, e.ns) + e.count(`select count(*) from job_details where sched_name = $1`, e.ns); n != 0 {
		t.Errorf("rejected commands changed %d rows", n)
	}
	// Each was handled once: nothing waits for an ack or comes round again.
	cons, err := e.js.Consumer(t.Context(), events.StreamCommands(e.ns), command.DurableName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("command consumer has %d unacked and %d redelivered messages after the rejections", info.NumAckPending, info.NumRedelivered)
	}
	// The consumer keeps running, and an applied command id is applied once.
	first := e.request("schedule_job", valid("ok"))
	if !first.OK {
		t.Fatalf("valid command rejected: %+v", first.Error)
	}
	again := e.request("schedule_job", valid("ok"))
	if !again.OK || fmt.Sprint(again.Result) != fmt.Sprint(first.Result) {
		t.Errorf("re-sent command answered %+v, first answer was %+v", again, first)
	}
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeTriggerScheduled); n != 1 {
		t.Errorf("%d TriggerScheduled events after sending the same command twice, want 1", n)
	}
	if _, err := e.js.Publish(t.Context(), events.Subjects(e.ns).Command("schedule_job"), mustJSON(t, valid("ok"))); err != nil {
		t.Fatal(err)
	}
	if _, err := e.js.Publish(t.Context(), events.Subjects(e.ns).Command("schedule_job"), mustJSON(t, valid("ok2"))); err != nil {
		t.Fatal(err)
	}
	e.waitFor(10*time.Second, "the next command to be applied", func() bool {
		return e.count(`select count(*) from triggers where sched_name = $1`, e.ns) == 2
	})
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeTriggerScheduled); n != 2 {
		t.Errorf("%d TriggerScheduled events, want 2", n)
	}
}

// A worker that dies in the middle of a job: the job is redelivered to another worker and its
// completion is recorded once.
func TestKilledWorkersJobIsRedelivered(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.JobTypes = []string{"block"} })
	started := make(chan struct{}, 1)
	var runsA atomic.Int32
	ackWait := func(c *worker.Config) { c.AckWait = 2 * time.Second }
	killA := e.startWorker("wA", ackWait, map[string]worker.HandlerFunc{"block": func(ctx context.Context, _ worker.Job) error {
		runsA.Add(1)
		started <- struct{}{}
		<-ctx.Done() // hangs until the process "dies"
		return ctx.Err()
	}})
	out := e.request("schedule_job", map[string]any{"id": "k", "job": job("g", "victim", "block", nil, nil),
		"triggers": []any{oneShot("g", "once", time.Now())}})
	if !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("worker A never started the job")
	}
	killA()
	e.startWorker("wB", ackWait, map[string]worker.HandlerFunc{"block": func(context.Context, worker.Job) error { return nil }})
	e.waitFor(30*time.Second, "the job's completion", func() bool {
		return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) == 1
	})
	var workerID string
	var attempt int
	if err := e.pool.QueryRow(t.Context(), `select data->>'worker', (data->>'attempt')::int from events
		where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted).Scan(&workerID, &attempt); err != nil {
		t.Fatal(err)
	}
	if workerID != "wB" || attempt < 2 {
		t.Errorf("completed by %s at attempt %d, want wB at attempt ≥ 2", workerID, attempt)
	}
	e.waitFor(5*time.Second, "the fired row to go", func() bool {
		return e.count(`select count(*) from fired_triggers where sched_name = $1`, e.ns) == 0
	})
	if n := e.count(`select count(*) from events where sched_name = $1 and type in ($2, $3)`, e.ns, events.TypeJobCompleted, events.TypeJobFailed); n != 1 {
		t.Errorf("%d outcomes recorded, want exactly 1", n)
	}
	if runsA.Load() != 1 {
		t.Errorf("worker A ran the job %d times", runsA.Load())
	}
}
