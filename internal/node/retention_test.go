package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/retention"
)

// TestRetentionDropsOldDaysAndReplayStillWorks: a day of the log is dropped once a snapshot
// covers it and no execution in flight needs its JobFired; replay then starts from the
// snapshot and still finds the tables equal, and the cluster goes on logging.
func TestRetentionDropsOldDaysAndReplayStillWorks(t *testing.T) {
	e := newEnv(t)
	stop := e.startNode("n1", nil)
	kill := e.startWorker("w1", nil, nil)
	now := time.Now()
	for _, c := range []map[string]any{
		{"id": "a", "job": job("g", "a", "noop", nil, nil), "triggers": []any{oneShot("g", "a", now)}},
		{"id": "b", "job": job("g", "b", "sleep", map[string]any{"duration": "2s"}, nil), "triggers": []any{oneShot("g", "b", now)}},
		{"id": "c", "job": job("g", "c", "noop", nil, map[string]any{"durable": true}),
			"triggers": []any{repeating("g", "c", now.Add(time.Hour), time.Hour, -1)}},
	} {
		if out := e.request("schedule_job", c); !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
	}
	e.waitCount(30*time.Second, "job b running", 1, `select count(*) from fired_triggers where sched_name = $1 and job_name = 'b' and state = 'EXECUTING'`, e.ns)

	// Ten days on, with a week's retention, today's partition is expired.
	upkeep := retention.NewEvents(retention.EventsConfig{Namespace: e.ns, Retention: 7 * 24 * time.Hour,
		SnapshotInterval: time.Nanosecond, Logger: e.log, Now: func() time.Time { return time.Now().Add(10 * 24 * time.Hour) }}, e.pool)
	today := "events_p" + time.Now().UTC().Format("20060102")
	dropped, err := upkeep.Pass(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(dropped, today) {
		t.Fatalf("dropped %v while job b runs: its JobFired is needed to recover it", dropped)
	}

	e.waitCount(30*time.Second, "both completions", 2, `select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
	stop()
	kill()
	if dropped, err = upkeep.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dropped, today) {
		t.Fatalf("dropped %v; want %s among them", dropped, today)
	}
	e.logDaysDropped()
	if n := e.count(`select count(*) from events where sched_name = $1`, e.ns); n != 0 {
		t.Fatalf("%d events left after today's partition was dropped", n)
	}
	rep, err := replay.Run(t.Context(), e.pool, e.ns, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equal() || rep.Snapshot.TakenAt.IsZero() || rep.Rows["triggers"] != 1 || rep.Rows["job_details"] != 1 {
		t.Fatalf("replay after retention: %+v", rep)
	}

	// The log goes on in today's partition, made again; the test's cleanup replays it all.
	e.startNode("n1", nil)
	e.startWorker("w1", nil, nil)
	if out := e.request("schedule_job", map[string]any{"id": "d", "job": job("g", "d", "noop", nil, nil),
		"triggers": []any{oneShot("g", "d", time.Now())}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	e.waitCount(30*time.Second, "job d's completion", 1, `select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
}
