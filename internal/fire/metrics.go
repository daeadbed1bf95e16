package fire

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the fire transaction's instruments (README, "Health and metrics").
type metrics struct {
	fires    metric.Int64Counter
	lateness metric.Float64Histogram
}

// The attribute sets of the fires counter, made once: a fire adds to a counter with no
// allocation of its own.
var (
	firedAttrs = telemetry.Attrs(attribute.String("outcome", "fired"))
	dropAttrs  = map[string]metric.MeasurementOption{}
)

func init() {
	for _, r := range []string{events.DropClaimLost, events.DropTriggerChanged, events.DropTriggerError, events.DropJobBusy} {
		dropAttrs[r] = telemetry.Attrs(attribute.String("outcome", "dropped"), attribute.String("reason", r))
	}
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "internal/fire")
	return metrics{
		fires: telemetry.Counter(m, "agate.scheduler.fires", "{fire}",
			"Claims of this node that fired (outcome fired: a JobFired committed) or were dropped at fire time (outcome dropped, with the reason of the ClaimDropped event)"),
		lateness: telemetry.Histogram(m, "agate.scheduler.fire.lateness", "s",
			"How late each fire was: its fired time minus its scheduled time, by the node's clock corrected to the database's", telemetry.LatencyBuckets),
	}
}

// committed records a fire transaction that committed.
func (m metrics) committed(ctx context.Context, fires []firing, drops []drop, now time.Time) {
	if len(fires) > 0 {
		m.fires.Add(ctx, int64(len(fires)), firedAttrs)
	}
	for _, fi := range fires {
		m.lateness.Record(ctx, now.Sub(fi.claim.SchedTime).Seconds())
	}
	for _, d := range drops {
		if o, ok := dropAttrs[d.reason]; ok {
			m.fires.Add(ctx, 1, o)
		} else { // a reason added without its set: counted all the same
			m.fires.Add(ctx, 1, telemetry.Attrs(attribute.String("outcome", "dropped"), attribute.String("reason", d.reason)))
		}
	}
}

// SetMeterProvider has the firer record its metrics with mp (nil: the global provider).
// Call it before the firer is used.
func (f *Firer) SetMeterProvider(mp metric.MeterProvider) { f.metrics = newMetrics(mp) }
