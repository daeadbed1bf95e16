package node

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/fire"
	"github.com/agatesched/agate/internal/recovery"
	"github.com/agatesched/agate/internal/telemetry"
)

// instrument has every step record its metrics with mp (nil: the global provider); see README,
// "Health and metrics", for what each counts.
func instrument(mp metric.MeterProvider, f *fire.Firer, a *acquire.Acquirer, c *command.Handler,
	d *complete.Consumer, r *recovery.Recoverer) {
	f.SetMeterProvider(mp)
	a.SetMeterProvider(mp)
	c.SetMeterProvider(mp)
	d.SetMeterProvider(mp)
	r.SetMeterProvider(mp)
}

// lockWaitHistogram is agate.scheduler.lock.wait: how long transactions waited for a lock
// partition they take waiting (fires, completions, commands; not the acquire passes, which
// skip a held partition).
func lockWaitHistogram(mp metric.MeterProvider) metric.Float64Histogram {
	return telemetry.Histogram(telemetry.Meter(mp, "internal/store"), "agate.scheduler.lock.wait", "s",
		"How long a transaction waited for a TRIGGER_ACCESS lock partition (SELECT ... FOR UPDATE on its locks row)",
		telemetry.LatencyBuckets)
}
