// Package metrictest reads metrics in tests: a meter provider with a manual reader, and the
// value of an instrument's series by name and attributes, without an HTTP listener.
package metrictest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader collects what a provider's instruments recorded.
type Reader struct {
	reader   *sdkmetric.ManualReader
	Provider *sdkmetric.MeterProvider
}

// New returns a Reader and its provider, shut down when tb ends.
func New(tb testing.TB) *Reader {
	r := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return &Reader{reader: r, Provider: mp}
}

// Attrs are the attributes of a series: the points whose attributes include them all are read.
type Attrs map[string]string

func (a Attrs) match(set attribute.Set) bool {
	for k, v := range a {
		if got, ok := set.Value(attribute.Key(k)); !ok || got.AsString() != v {
			return false
		}
	}
	return true
}

func (r *Reader) collect(tb testing.TB, name string) (metricdata.Metrics, bool) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatalf("collecting metrics: %v", err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// Sum is the total of the points of the counter or up-down counter name whose attributes
// include attrs; 0 when nothing was recorded.
func (r *Reader) Sum(tb testing.TB, name string, attrs Attrs) int64 {
	tb.Helper()
	m, ok := r.collect(tb, name)
	if !ok {
		return 0
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		tb.Fatalf("%s is a %T, not an int64 sum", name, m.Data)
	}
	var total int64
	for _, p := range s.DataPoints {
		if attrs.match(p.Attributes) {
			total += p.Value
		}
	}
	return total
}

// Histogram is how many values the histogram name recorded in the series whose attributes
// include attrs, and their sum.
func (r *Reader) Histogram(tb testing.TB, name string, attrs Attrs) (count uint64, sum float64) {
	tb.Helper()
	m, ok := r.collect(tb, name)
	if !ok {
		return 0, 0
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		tb.Fatalf("%s is a %T, not a float64 histogram", name, m.Data)
	}
	for _, p := range h.DataPoints {
		if attrs.match(p.Attributes) {
			count += p.Count
			sum += p.Sum
		}
	}
	return count, sum
}

// Gauge is the value of the float64 gauge name in the series whose attributes include attrs,
// and whether there is one. Observable gauges are read (their callbacks run) by this call.
func (r *Reader) Gauge(tb testing.TB, name string, attrs Attrs) (float64, bool) {
	tb.Helper()
	m, ok := r.collect(tb, name)
	if !ok {
		return 0, false
	}
	g, ok := m.Data.(metricdata.Gauge[float64])
	if !ok {
		tb.Fatalf("%s is a %T, not a float64 gauge", name, m.Data)
	}
	for _, p := range g.DataPoints {
		if attrs.match(p.Attributes) {
			return p.Value, true
		}
	}
	return 0, false
}
