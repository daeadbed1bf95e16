package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Meter returns the meter of an Agate package (instrumentation name = package path) from mp,
// or from the global provider when mp is nil: a no-op unless a binary installed one, so that a
// step used on its own (in a test) counts nothing and costs next to nothing.
func Meter(mp metric.MeterProvider, pkg string) metric.Meter {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	return mp.Meter("github.com/agatesched/agate/" + pkg)
}

// Bucket boundaries of the histograms, in the instruments' units.
var (
	// LatencyBuckets, in seconds, for how late a fire is: from a few milliseconds (a node keeping
	// up) to minutes (a backlog, past the default misfire threshold).
	LatencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// DurationBuckets, in seconds, for how long a job runs: from a no-op to an hour.
	DurationBuckets = []float64{0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	// BatchBuckets, in items, for batch sizes up to the largest batch a transaction takes.
	BatchBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000}
)

// Counter and Histogram create an instrument of m. An invalid name or option is a
// programming error the instrumentation's tests catch; should one reach a binary, it goes to
// OpenTelemetry's error handler and the instrument the SDK returned anyway (a no-op at worst)
// is used, rather than stopping the process.
func Counter(m metric.Meter, name, unit, description string) metric.Int64Counter {
	c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(description))
	handle(name, err)
	return c
}

// Histogram: see [Counter]. buckets are its explicit bucket boundaries.
func Histogram(m metric.Meter, name, unit, description string, buckets []float64) metric.Float64Histogram {
	h, err := m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(description),
		metric.WithExplicitBucketBoundaries(buckets...))
	handle(name, err)
	return h
}

// Gauge creates an observable gauge of m, for what is cheaper to read when a scrape asks than to
// track: observe it in a callback registered with m.RegisterCallback, whose Registration lets the
// owner stop observing when it stops. See [Counter] for errors.
func Gauge(m metric.Meter, name, unit, description string) metric.Float64ObservableGauge {
	g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(description))
	handle(name, err)
	return g
}

// ObservableCounter creates an observable counter of m, for a count kept in the owner's own
// atomic counters and read when a scrape asks, which costs an event an atomic add instead of an
// instrument call; observe it in a callback as for [Gauge]. See [Counter] for errors.
func ObservableCounter(m metric.Meter, name, unit, description string) metric.Int64ObservableCounter {
	c, err := m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(description))
	handle(name, err)
	return c
}

// ObservableUpDownCounter: see [ObservableCounter].
func ObservableUpDownCounter(m metric.Meter, name, unit, description string) metric.Int64ObservableUpDownCounter {
	c, err := m.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(description))
	handle(name, err)
	return c
}

func handle(name string, err error) {
	if err != nil {
		otel.Handle(fmt.Errorf("creating instrument %s: %w", name, err))
	}
}

// Attrs is a measurement option carrying kv, to build once and pass to every measurement with
// those attributes: a set made per measurement would allocate on the hot path.
func Attrs(kv ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}

// Prometheus is a meter provider whose metrics Handler serves in Prometheus's text format.
// Its registry is its own, never the client library's global default one, and holds besides
// the OpenTelemetry metrics the Go runtime's (go_*) and the process's (process_*).
type Prometheus struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
}

// NewPrometheus builds the provider of a process; service names it in target_info
// (service.name) unless OTEL_SERVICE_NAME does.
//
// Names follow Prometheus's conventions (otlptranslator.UnderscoreEscapingWithSuffixes, set
// explicitly so that a change of the exporter's default does not rename them): dots become
// underscores, counters end in _total, a unit in seconds adds _seconds, and units in braces
// ({fire}) add nothing. Scope labels are left out: every name already says which part of Agate
// it counts.
func NewPrometheus(service string) (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("registering the Go runtime metrics: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("registering the process metrics: %w", err)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo(),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("creating the Prometheus exporter: %w", err)
	}
	res := resource.Default() // reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		if res, err = resource.Merge(res, resource.NewSchemaless(semconv.ServiceName(service))); err != nil {
			return nil, fmt.Errorf("building OpenTelemetry resource: %w", err)
		}
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	return &Prometheus{Provider: mp, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}, nil
}

// Shutdown stops the provider; the handler serves nothing new after it.
func (p *Prometheus) Shutdown(ctx context.Context) error {
	if err := p.Provider.Shutdown(ctx); err != nil && !errors.Is(err, sdkmetric.ErrReaderShutdown) {
		return fmt.Errorf("stopping the meter provider: %w", err)
	}
	return nil
}
