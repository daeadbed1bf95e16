package node

import (
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/complete"
	"github.com/agatesched/agate/internal/fire"
	"github.com/agatesched/agate/internal/recovery"
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
