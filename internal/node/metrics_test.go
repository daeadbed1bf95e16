package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
	"github.com/agatesched/agate/internal/worker"
)

// TestMetrics runs jobs through a node and a worker sharing a meter provider with a manual
// reader, and reads what each step counted: commands by outcome, fires and their lateness,
// acquire batches, completions by outcome, and the worker's runs, durations and jobs in flight.
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	m := metrictest.New(t)
	signals := &node.TestSignals{}
	signals.Complete.Applied.Init()
	e.startNode("n1", func(c *node.Config) {
		c.MeterProvider, c.TestSignals = m.Provider, signals
		c.JobTypes = append(node.BuiltinJobTypes(), "boom")
	})
	e.startWorker("w1", func(c *worker.Config) { c.MeterProvider = m.Provider }, map[string]worker.HandlerFunc{
		"boom": func(context.Context, worker.Job) error { return worker.Permanent(errors.New("boom")) },
	})

	now := time.Now()
	for _, j := range []struct{ name, typ string }{{"a", "noop"}, {"b", "noop"}, {"c", "noop"}, {"d", "boom"}} {
		if out := e.request("schedule_job", map[string]any{"id": "m-" + j.name, "job": job("g", j.name, j.typ, nil, nil),
			"triggers": []any{oneShot("g", j.name, now)}}); !out.OK {
			t.Fatalf("schedule_job %s: %+v", j.name, out.Error)
		}
	}
	if out := e.request("schedule_job", map[string]any{"id": "m-bad", "job": job("g", "e", "noop", nil, nil),
		"triggers": []any{map[string]any{"group": "g", "name": "e", "cron": map[string]any{"expression": "not cron"}}}}); out.OK {
		t.Fatal("a schedule_job with a bad cron expression was accepted")
	}
	if out := e.request("no_such_command", map[string]any{"id": "m-unknown"}); out.Error == nil || out.Error.Code != command.CodeInvalidArgument {
		t.Fatalf("an unknown command: %+v", out)
	}

	// The worker counts a run before it publishes its outcome, and the node counts what it
	// recorded before Applied is signalled: once four executions ended, every count is final.
	ended := 0
	for ended < 4 {
		ended += signals.Complete.Applied.WaitUntil(t, func(a complete.Applied) bool { return a.Ended > 0 }).Ended
	}

	for _, c := range []struct {
		name  string
		attrs metrictest.Attrs
		want  int64
	}{
		{"agate.scheduler.commands", metrictest.Attrs{"command": "schedule_job", "code": "ok"}, 4},
		{"agate.scheduler.commands", metrictest.Attrs{"command": "schedule_job", "code": command.CodeInvalidArgument}, 1},
		{"agate.scheduler.commands", metrictest.Attrs{"command": "unknown", "code": command.CodeInvalidArgument}, 1},
		{"agate.scheduler.fires", metrictest.Attrs{"outcome": "fired"}, 4},
		{"agate.scheduler.fires", metrictest.Attrs{"outcome": "dropped"}, 0},
		{"agate.scheduler.completions", metrictest.Attrs{"outcome": "completed"}, 3},
		{"agate.scheduler.completions", metrictest.Attrs{"outcome": "failed_final"}, 1},
		{"agate.scheduler.completions", metrictest.Attrs{"outcome": "duplicate"}, 0},
		{"agate.worker.runs", metrictest.Attrs{"job_type": "noop", "outcome": "completed"}, 3},
		{"agate.worker.runs", metrictest.Attrs{"job_type": "boom", "outcome": "failed_final"}, 1},
		{"agate.worker.jobs.in_flight", nil, 0},
		{"agate.scheduler.recovery.nodes", nil, 0},
		{"agate.scheduler.misfires", nil, 0},
	} {
		if got := m.Sum(t, c.name, c.attrs); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, got, c.want)
		}
	}
	if count, sum := m.Histogram(t, "agate.scheduler.fire.lateness", nil); count != 4 || sum < 0 || sum > 4*10 {
		t.Errorf("fire lateness: %d values summing to %.3f s, want 4 of a few seconds at most", count, sum)
	}
	// Every fire transaction of the queue and every completion takes its partition waiting.
	if count, sum := m.Histogram(t, "agate.scheduler.lock.wait", nil); count == 0 || sum < 0 || sum > 30 {
		t.Errorf("lock waits: %d summing to %.3f s, want some, of a few seconds at most", count, sum)
	}
	if count, sum := m.Histogram(t, "agate.scheduler.acquire.batch.size", nil); count == 0 || sum != 4 {
		t.Errorf("acquire batches: %d summing to %v triggers, want the 4 triggers claimed", count, sum)
	}
	if count, _ := m.Histogram(t, "agate.worker.run.duration", metrictest.Attrs{"job_type": "noop"}); count != 3 {
		t.Errorf("run durations of noop jobs: %d, want 3", count)
	}
	if count, sum := m.Histogram(t, "agate.worker.start.lateness", metrictest.Attrs{"job_type": "noop"}); count != 3 || sum < 0 || sum > 3*10 {
		t.Errorf("start lateness of noop jobs: %d values summing to %.3f s, want 3 of a few seconds at most", count, sum)
	}
	// Every consumer delivered all it had: the node reports its own and the workers' (read from
	// JetStream when collected), none with anything pending.
	for _, c := range []string{complete.DurableName, "worker-noop", "worker-boom"} {
		if got, ok := m.Gauge(t, "agate.consumer.pending.messages", metrictest.Attrs{"consumer": c}); !ok || got != 0 {
			t.Errorf("consumer %s: pending %v (reported: %v), want 0", c, got, ok)
		}
	}
	// The node published what it committed; the sweep is at most a few seconds behind.
	if lag, ok := m.Gauge(t, "agate.scheduler.outbox.lag", nil); !ok || lag < 0 || lag > 60 {
		t.Errorf("outbox lag %v s (reported: %v), want a few seconds at most", lag, ok)
	}
}
