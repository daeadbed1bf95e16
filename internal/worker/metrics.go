package worker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the worker's instruments (README, "Health and metrics").
type metrics struct {
	runs     metric.Int64Counter
	duration metric.Float64Histogram
	lateness metric.Float64Histogram
	inFlight metric.Int64UpDownCounter
	// Attribute sets per job type (registered before New, so known) and outcome, made once.
	byType    map[string]metric.MeasurementOption
	byOutcome map[string]map[string]metric.MeasurementOption
}

// Outcomes of a run.
const (
	outcomeCompleted   = "completed"    // the handler returned nil
	outcomeFailed      = "failed"       // it failed, and another attempt follows
	outcomeFailedFinal = "failed_final" // it failed for the last time (permanent, or the last attempt)
	outcomeCancelled   = "cancelled"    // the worker stopped before it finished (drain timeout): redelivered
)

func newMetrics(mp metric.MeterProvider, types []string) metrics {
	m := telemetry.Meter(mp, "internal/worker")
	ms := metrics{
		runs: telemetry.Counter(m, "agate.worker.runs", "{run}",
			"Job runs this worker finished, by job type and outcome (completed, failed: retried, failed_final, cancelled: stopped by shutdown and redelivered)"),
		duration: telemetry.Histogram(m, "agate.worker.run.duration", "s",
			"How long each run's handler took, by job type and outcome", telemetry.DurationBuckets),
		lateness: telemetry.Histogram(m, "agate.worker.start.lateness", "s",
			"How late each job's first attempt started: its handler's start − the fire's scheduled time, by job type", telemetry.LatencyBuckets),
		inFlight: telemetry.UpDownCounter(m, "agate.worker.jobs.in_flight", "{job}",
			"Jobs whose handler is running now, by job type"),
		byType:    map[string]metric.MeasurementOption{},
		byOutcome: map[string]map[string]metric.MeasurementOption{},
	}
	for _, typ := range types {
		ms.byType[typ] = telemetry.Attrs(attribute.String("job_type", typ))
		ms.byOutcome[typ] = map[string]metric.MeasurementOption{}
		for _, o := range []string{outcomeCompleted, outcomeFailed, outcomeFailedFinal, outcomeCancelled} {
			ms.byOutcome[typ][o] = telemetry.Attrs(attribute.String("job_type", typ), attribute.String("outcome", o))
		}
	}
	return ms
}

// started and finished bracket a run of a job of type typ (a type of the registry); late is how
// long after its scheduled time a first attempt started (retries start late on purpose: not
// recorded).
func (m metrics) started(ctx context.Context, typ string, attempt int, late time.Duration) {
	m.inFlight.Add(ctx, 1, m.byType[typ])
	if attempt == 1 {
		m.lateness.Record(ctx, max(late, 0).Seconds(), m.byType[typ])
	}
}

func (m metrics) finished(ctx context.Context, typ, outcome string, took time.Duration) {
	m.inFlight.Add(ctx, -1, m.byType[typ])
	o := m.byOutcome[typ][outcome]
	m.runs.Add(ctx, 1, o)
	m.duration.Record(ctx, took.Seconds(), o)
}
