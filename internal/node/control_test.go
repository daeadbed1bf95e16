package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/worker"
)

// Pausing a group stops every trigger in it at once — a claim made ahead before the pause is
// dropped, not fired — and a trigger added to it later starts paused; resuming the group starts
// them all again. Triggers of other groups fire throughout. In both lock modes.
func TestPauseGroupStopsItsTriggers(t *testing.T) {
	lockModes(t, func(t *testing.T, mode func(*node.Config)) {
		e := newEnv(t)
		e.startNode("n1", func(c *node.Config) { mode(c); c.FireAhead = 500 * time.Millisecond })
		e.startWorker("w1", nil, nil)
		t0 := time.Now().Add(500 * time.Millisecond)
		for i, group := range []string{"paused", "paused", "other"} {
			name := group + string(rune('a'+i))
			if out := e.request("schedule_job", map[string]any{"id": name, "job": job("g", name, "noop", nil, nil),
				"triggers": []any{repeating(group, name, t0, 50*time.Millisecond, -1)}}); !out.OK {
				t.Fatalf("schedule_job: %+v", out.Error)
			}
		}
		fired := func(group string) int {
			return e.count(`select count(*) from events where sched_name = $1 and type = $2 and data->'trigger'->>'group' = $3`,
				e.ns, events.TypeJobFired, group)
		}
		e.waitFor(10*time.Second, "both groups to fire", func() bool { return fired("paused") >= 10 && fired("other") >= 5 })

		if out := e.request("pause_group", map[string]any{"id": "pause", "group": "paused"}); !out.OK {
			t.Fatalf("pause_group: %+v", out.Error)
		}
		if out := e.request("schedule_job", map[string]any{"id": "later", "job": job("g", "later", "noop", nil, nil),
			"triggers": []any{repeating("paused", "later", time.Now(), 50*time.Millisecond, -1)}}); !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
		// Every fire of the paused group committed before the pause's own transaction.
		var pausedAt int64
		if err := e.pool.QueryRow(t.Context(), `select seq from events where sched_name = $1 and type = $2 and aggregate_id = 'paused'`,
			e.ns, events.TypeGroupPaused).Scan(&pausedAt); err != nil {
			t.Fatal(err)
		}
		otherAtPause := fired("other")
		e.waitFor(10*time.Second, "the other group to go on firing", func() bool { return fired("other") >= otherAtPause+20 })
		if n := e.count(`select count(*) from events where sched_name = $1 and type = $2 and data->'trigger'->>'group' = 'paused' and seq > $3`,
			e.ns, events.TypeJobFired, pausedAt); n != 0 {
			t.Fatalf("%d fires of the paused group after the pause", n)
		}
		if n := e.count(`select count(*) from triggers where sched_name = $1 and trigger_group = 'paused' and state <> 'PAUSED'`, e.ns); n != 0 {
			t.Fatalf("%d triggers of the paused group are not PAUSED", n)
		}

		if out := e.request("resume_group", map[string]any{"id": "resume", "group": "paused"}); !out.OK {
			t.Fatalf("resume_group: %+v", out.Error)
		}
		e.waitCount(10*time.Second, "the added trigger to fire after the resume", 1,
			`select count(*) from events where sched_name = $1 and type = $2 and data->'trigger'->>'name' = 'later'`, e.ns, events.TypeJobFired)
	})
}

// A stateful job (persistData, nonconcurrent): each run hands back new job data and the next run
// sees it, as with Quartz's @PersistJobDataAfterExecution.
func TestStatefulJobSeesTheDataItsLastRunHandedBack(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.JobTypes = append(node.BuiltinJobTypes(), "counter") })
	var mu sync.Mutex
	var seen []float64
	e.startWorker("w1", nil, map[string]worker.HandlerFunc{"counter": func(ctx context.Context, j worker.Job) error {
		var d struct {
			Count float64 `json:"count"`
		}
		if err := json.Unmarshal(j.Data, &d); err != nil {
			return err
		}
		mu.Lock()
		seen = append(seen, d.Count)
		mu.Unlock()
		return j.SetData(map[string]any{"count": d.Count + 1})
	}})
	if out := e.request("schedule_job", map[string]any{"id": "stateful",
		"job":      job("g", "counter", "counter", map[string]any{"count": 0}, map[string]any{"nonconcurrent": true, "persistData": true}),
		"triggers": []any{repeating("g", "counter", time.Now(), 100*time.Millisecond, 4)}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	e.waitCount(20*time.Second, "five runs", 5, `select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
	mu.Lock()
	defer mu.Unlock()
	if want := []float64{0, 1, 2, 3, 4}; !slices.Equal(seen, want) {
		t.Fatalf("the runs saw counts %v, want %v", seen, want)
	}
}

// interrupt_job cancels a run in progress: its handler's context ends with ErrInterrupted as the
// cause, and the fire ends with a final JobFailed marked interrupted (no retry).
func TestInterruptJobCancelsTheRun(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) { c.JobTypes = append(node.BuiltinJobTypes(), "long") })
	started := make(chan struct{}, 1)
	e.startWorker("w1", nil, map[string]worker.HandlerFunc{"long": func(ctx context.Context, j worker.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), worker.ErrInterrupted) {
			return fmt.Errorf("cancelled, but not by an interrupt: %w", context.Cause(ctx))
		}
		return ctx.Err()
	}})
	if out := e.request("schedule_job", map[string]any{"id": "long", "job": job("g", "long", "long", nil, map[string]any{"timeout": "1m"}),
		"triggers": []any{oneShot("g", "long", time.Now())}}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not start")
	}
	out := e.request("interrupt_job", map[string]any{"id": "stop-it", "job": map[string]any{"group": "g", "name": "long"}})
	if !out.OK {
		t.Fatalf("interrupt_job: %+v", out.Error)
	}
	e.waitCount(20*time.Second, "the interrupted outcome", 1, `select count(*) from events where sched_name = $1 and type = $2
		and (data->'error'->>'interrupted')::bool and (data->'error'->>'final')::bool`, e.ns, events.TypeJobFailed)
	if n := e.count(`select count(*) from fired_triggers where sched_name = $1`, e.ns); n != 0 {
		t.Fatalf("%d fired rows left after the interrupted run", n)
	}
	// A fire id that is not executing is not found.
	if out := e.request("interrupt_job", map[string]any{"id": "again", "fireId": "0193a5e8-9bfe-7a00-b111-222233334444"}); out.OK || out.Error.Code != "not_found" {
		t.Fatalf("interrupt of a fire not executing: %+v", out)
	}
}
