package fire_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/fire"
	"github.com/agatesched/agate/internal/telemetry"
)

// schedulingTraceParent is the span of the command that scheduled the trigger, as its row stores it.
const schedulingTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// firedTraceParents fires a repeating trigger scheduled in schedulingTraceParent's trace twice,
// with tp, and returns the traceparents of its two JobFired events.
func firedTraceParents(t *testing.T, tp trace.TracerProvider) []string {
	t.Helper()
	e := setup(t)
	e.firer = fire.New(fire.Config{Namespace: e.f.Namespace(), InstanceID: "n1", Now: e.clock.Now, TracerProvider: tp})
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	e.f.Exec(t, `update triggers set trace_context = $2 where sched_name = $1`, e.f.Namespace(), schedulingTraceParent)
	for i := range 2 {
		at := t0.Add(time.Duration(i) * time.Minute)
		e.clock.Set(at)
		if n := e.fire(t, e.claim(t, key("t"), key("j"), at, false, false)); n != 1 {
			t.Fatalf("fire %d: fired %d, want 1", i, n)
		}
	}
	rows, err := e.f.Pool.Query(t.Context(), `select coalesce(trace_context, '') from events where sched_name = $1 and type = $2 order by seq`,
		e.f.Namespace(), events.TypeJobFired)
	if err != nil {
		t.Fatal(err)
	}
	var tps []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		tps = append(tps, s)
	}
	if len(tps) != 2 {
		t.Fatalf("%d JobFired events, want 2", len(tps))
	}
	return tps
}

// Each fire of a repeating trigger is a trace of its own: its fire span is a root linked to the
// span that scheduled the trigger, and JobFired carries the fire span's context.
func TestEachFireIsATrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tps := firedTraceParents(t, tp)

	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans ended, want the 2 fire spans", len(spans))
	}
	scheduling := trace.SpanContextFromContext(telemetry.WithTraceParent(context.Background(), schedulingTraceParent))
	traces := map[trace.TraceID]bool{}
	for i, s := range spans {
		if s.Name() != "agate.fire" || s.Parent().IsValid() {
			t.Errorf("span %q with parent %v, want a root agate.fire span", s.Name(), s.Parent())
		}
		if s.SpanContext().TraceID() == scheduling.TraceID() {
			t.Errorf("fire %d is in the scheduling trace", i)
		}
		traces[s.SpanContext().TraceID()] = true
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.TraceID() != scheduling.TraceID() || l[0].SpanContext.SpanID() != scheduling.SpanID() {
			t.Errorf("fire %d links %v, want the scheduling span %v", i, l, scheduling)
		}
		if want := s.SpanContext().TraceID().String() + "-" + s.SpanContext().SpanID().String(); !strings.Contains(tps[i], want) {
			t.Errorf("JobFired %d carries %q, not its fire span %s", i, tps[i], want)
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.String()
		}
		for k, v := range map[string]string{"agate.job": "g.j", "agate.trigger": "g.t", "agate.fire.batch_size": "1",
			"messaging.system": "nats", "messaging.operation.type": "create", "db.system.name": "postgresql"} {
			if attrs[k] != v {
				t.Errorf("fire %d: attribute %s = %q, want %q", i, k, attrs[k], v)
			}
		}
	}
	if len(traces) != 2 {
		t.Errorf("the two fires share a trace")
	}
}

// Without a recording tracer, nothing is recorded and JobFired carries the scheduling command's
// trace context on.
func TestFireWithoutTracerKeepsTheTraceContext(t *testing.T) {
	for i, tp := range firedTraceParents(t, noop.NewTracerProvider()) {
		if tp != schedulingTraceParent {
			t.Errorf("JobFired %d carries %q, want the scheduling traceparent %q", i, tp, schedulingTraceParent)
		}
	}
}
