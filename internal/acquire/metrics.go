package acquire

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the acquire loop's instruments (README, "Health and metrics").
type metrics struct {
	batch metric.Float64Histogram
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "internal/acquire")
	return metrics{
		batch: telemetry.Histogram(m, "agate.scheduler.acquire.batch.size", "{trigger}",
			"Triggers claimed by each acquire transaction that claimed any (at most --batch); transactions that found nothing due are not recorded",
			telemetry.BatchBuckets),
	}
}

// SetMeterProvider has the acquirer record its metrics with mp (nil: the global provider).
// Call it before Run.
func (a *Acquirer) SetMeterProvider(mp metric.MeterProvider) { a.metrics = newMetrics(mp) }
