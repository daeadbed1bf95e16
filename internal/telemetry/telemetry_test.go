package telemetry

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// Trace context survives the trip through a stored traceparent and NATS headers, under the
// lower-case W3C key that events.Message writes.
func TestTraceParentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := WithTraceParent(context.Background(), tp)
	if got := TraceParent(ctx); got != tp {
		t.Fatalf("TraceParent = %q, want %q", got, tp)
	}
	h := nats.Header{}
	ToHeader(ctx, h)
	if got := h.Get("traceparent"); got != tp {
		t.Fatalf("header traceparent = %q, want %q (headers %v)", got, tp, h)
	}
	sc := trace.SpanContextFromContext(FromHeader(context.Background(), nats.Header{"traceparent": {tp}}))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || !sc.IsRemote() {
		t.Fatalf("FromHeader lost the trace: %v", sc)
	}
	if TraceParent(context.Background()) != "" {
		t.Fatal("a context without a span has a traceparent")
	}
}
