// Package telemetry sets up OpenTelemetry from the standard OTEL_* variables and carries W3C trace
// context through trigger rows and message headers, so one job can be followed from the
// producer's command to its completion.
package telemetry

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Setup installs the global tracer provider and the W3C propagator. An OTLP/HTTP exporter is used
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the exporter
// reads the other OTEL_* variables itself); service names the process unless OTEL_SERVICE_NAME
// does. Otherwise spans are not recorded, but trace context
// still propagates. The returned function flushes and stops the exporter.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
	}
	res := resource.Default() // reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(service)))
	}
	if err != nil {
		return nil, fmt.Errorf("building OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// Tracer returns the tracer of an Agate package (instrumentation name = package path).
func Tracer(pkg string) trace.Tracer {
	return otel.Tracer(InstrumentationName(pkg))
}

// InstrumentationName is the instrumentation scope name of an Agate package: its path.
func InstrumentationName(pkg string) string { return "github.com/agatesched/agate/" + pkg }

// propagator is fixed to W3C trace context: that is what rows and headers store, whatever the
// global propagator is.
var propagator = propagation.TraceContext{}

// TraceParent returns the W3C traceparent of ctx's span, "" when there is none. Every fire and
// every outcome asks for one: a carrier that keeps the traceparent alone spares a map each time.
func TraceParent(ctx context.Context) string {
	var c parentCarrier
	propagator.Inject(ctx, &c)
	return c.traceParent
}

// parentCarrier is a propagation.TextMapCarrier that keeps only the traceparent written to it.
type parentCarrier struct{ traceParent string }

func (c *parentCarrier) Get(string) string { return "" }

func (c *parentCarrier) Set(key, value string) {
	if key == "traceparent" {
		c.traceParent = value
	}
}

func (c *parentCarrier) Keys() []string { return nil }

// WithTraceParent returns ctx carrying the remote span context of a stored traceparent.
func WithTraceParent(ctx context.Context, traceParent string) context.Context {
	if traceParent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent})
}

// FromHeader returns ctx carrying the trace context of a NATS message's headers.
func FromHeader(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// ToHeader writes ctx's trace context into NATS headers.
func ToHeader(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, headerCarrier(h))
}

// headerCarrier reads and writes NATS headers with the exact keys W3C names ("traceparent"):
// NATS headers are case-sensitive, unlike HTTP's, so propagation.HeaderCarrier's canonical
// "Traceparent" would miss them.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Attributes of Agate's spans from OpenTelemetry's messaging and database semantic conventions.
var (
	MessagingNATS = attribute.String("messaging.system", "nats")
	DBPostgres    = attribute.String("db.system.name", "postgresql")
)

// Messaging operation types (messaging.operation.type).
const (
	OpCreate  = "create"  // a message is made, to be sent later (the fire writes JobFired to the outbox)
	OpPublish = "publish" // a message is sent
	OpProcess = "process" // a received message is handled
)

// Messaging returns the messaging attributes of a span that does op on subject.
func Messaging(op, subject string) []attribute.KeyValue {
	return []attribute.KeyValue{MessagingNATS, attribute.String("messaging.operation.type", op),
		attribute.String("messaging.destination.name", subject)}
}
