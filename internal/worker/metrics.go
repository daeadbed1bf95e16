package worker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the worker's instruments (README, "Health and metrics"). The two histograms are
// recorded at every run; the runs counted and the runs in flight are atomic counters that a
// collection reads, which costs a run an atomic add where an instrument call cost a
// microsecond (a tenth of a worker's CPU in a burst went to five instrument calls a fire).
type metrics struct {
	duration metric.Float64Histogram
	lateness metric.Float64Histogram
	// runs and inFlight are observed from byType by the callback register adds.
	runs     metric.Int64ObservableCounter
	inFlight metric.Int64ObservableUpDownCounter
	meter    metric.Meter
	// byType holds each job type's counters and attribute sets (types are registered before
	// New, so known), made once.
	byType map[string]*typeMetrics
}

// outcome is how a run ended.
type outcome int

// Outcomes of a run.
const (
	outcomeCompleted   outcome = iota // the handler returned nil
	outcomeFailed                     // it failed, and another attempt follows
	outcomeFailedFinal                // it failed for the last time (permanent, or the last attempt)
	outcomeCancelled                  // the worker stopped before it finished (drain timeout): redelivered
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"completed", "failed", "failed_final", "cancelled"}

type typeMetrics struct {
	attrs     metric.MeasurementOption // job_type
	inFlight  atomic.Int64
	runs      [numOutcomes]atomic.Int64
	byOutcome [numOutcomes]metric.MeasurementOption // job_type and outcome
}

func newMetrics(mp metric.MeterProvider, types []string) *metrics {
	m := telemetry.Meter(mp, "internal/worker")
	ms := &metrics{
		runs: telemetry.ObservableCounter(m, "agate.worker.runs", "{run}",
			"Job runs this worker finished, by job type and outcome (completed, failed: retried, failed_final, cancelled: stopped by shutdown and redelivered)"),
		inFlight: telemetry.ObservableUpDownCounter(m, "agate.worker.jobs.in_flight", "{job}",
			"Jobs whose handler is running now, by job type"),
		meter: m,
		duration: telemetry.Histogram(m, "agate.worker.run.duration", "s",
			"How long each run's handler took, by job type and outcome", telemetry.DurationBuckets),
		lateness: telemetry.Histogram(m, "agate.worker.start.lateness", "s",
			"How late each job's first attempt started: its handler's start − the fire's scheduled time, by job type", telemetry.LatencyBuckets),
		byType: map[string]*typeMetrics{},
	}
	for _, typ := range types {
		tm := &typeMetrics{attrs: telemetry.Attrs(attribute.String("job_type", typ))}
		for o, name := range outcomeNames {
			tm.byOutcome[o] = telemetry.Attrs(attribute.String("job_type", typ), attribute.String("outcome", name))
		}
		ms.byType[typ] = tm
	}
	return ms
}

// register has collections read the run counters until the returned function is called.
func (m *metrics) register() (unregister func(), err error) {
	reg, err := m.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		for _, tm := range m.byType {
			obs.ObserveInt64(m.inFlight, tm.inFlight.Load(), tm.attrs)
			for o := range numOutcomes {
				// A series appears with its first run, as a synchronous counter's did.
				if n := tm.runs[o].Load(); n > 0 {
					obs.ObserveInt64(m.runs, n, tm.byOutcome[o])
				}
			}
		}
		return nil
	}, m.runs, m.inFlight)
	if err != nil {
		return nil, fmt.Errorf("registering the worker's run counters: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}

// started and finished bracket a run of a job of type typ (a type of the registry); late is how
// long after its scheduled time a first attempt started (retries start late on purpose: not
// recorded).
func (m *metrics) started(ctx context.Context, typ string, attempt int, late time.Duration) {
	tm := m.byType[typ]
	tm.inFlight.Add(1)
	if attempt == 1 {
		m.lateness.Record(ctx, max(late, 0).Seconds(), tm.attrs)
	}
}

func (m *metrics) finished(ctx context.Context, typ string, o outcome, took time.Duration) {
	tm := m.byType[typ]
	tm.inFlight.Add(-1)
	tm.runs[o].Add(1)
	m.duration.Record(ctx, took.Seconds(), tm.byOutcome[o])
}
