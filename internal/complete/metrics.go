package complete

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the completion consumer's instruments (README, "Health and metrics").
type metrics struct {
	completions metric.Int64Counter
}

// Outcomes of the completions counter.
const (
	outcomeCompleted   = "completed"    // JobCompleted
	outcomeFailed      = "failed"       // JobFailed that a later attempt may follow
	outcomeFailedFinal = "failed_final" // JobFailed{final: true}
	outcomeDuplicate   = "duplicate"    // an ending outcome of an execution that had already ended: not recorded again
)

var outcomeAttrs = map[string]metric.MeasurementOption{}

func init() {
	for _, o := range []string{outcomeCompleted, outcomeFailed, outcomeFailedFinal, outcomeDuplicate} {
		outcomeAttrs[o] = telemetry.Attrs(attribute.String("outcome", o))
	}
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "internal/complete")
	return metrics{completions: telemetry.Counter(m, "agate.scheduler.completions", "{completion}",
		"Job outcomes this node recorded: completed, failed (another attempt may follow), failed_final, "+
			"and duplicate (the outcome of an execution already ended, not recorded again)")}
}

// recorded counts the outcomes of a batch that committed, by outcome.
func (m metrics) recorded(ctx context.Context, counts map[string]int64) {
	for o, n := range counts {
		if n > 0 {
			m.completions.Add(ctx, n, outcomeAttrs[o])
		}
	}
}

// SetMeterProvider has the consumer record its metrics with mp (nil: the global provider). Call
// it before Run.
func (c *Consumer) SetMeterProvider(mp metric.MeterProvider) { c.metrics = newMetrics(mp) }
