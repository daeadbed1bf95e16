package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// lagTimeout bounds the query of one collection, well inside a scrape's timeout.
const lagTimeout = 2 * time.Second

// CursorLag is how long the oldest event the sweep has not passed yet has waited: how far the
// sweep, the publisher of last resort, is behind. ok is false when the namespace has no cursor.
// In steady state it stays below SweepDelay plus a check-in interval (a young event is left to
// its own node until then); it grows when the sweep cannot publish (JetStream down) or cannot keep
// up. It is one indexed probe after the cursor.
func (o *Outbox) CursorLag(ctx context.Context) (lag time.Duration, ok bool, err error) {
	var secs float64
	err = o.pool.QueryRow(ctx, queries.Get("CursorLag"), o.cfg.Namespace).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the outbox cursor lag: %w", err)
	}
	return time.Duration(secs * float64(time.Second)), true, nil
}

// RegisterMetrics has the outbox report agate_scheduler_outbox_lag_seconds (CursorLag, read at
// each collection) on mp (nil: the global provider) until the returned function is called. A
// collection whose query fails reports nothing.
func (o *Outbox) RegisterMetrics(mp metric.MeterProvider) (unregister func(), err error) {
	m := telemetry.Meter(mp, "internal/outbox")
	g := telemetry.Gauge(m, "agate.scheduler.outbox.lag", "s",
		"How long the oldest event the outbox sweep has not passed has waited (0: caught up)")
	reg, err := m.RegisterCallback(func(ctx context.Context, obs metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, lagTimeout)
		defer cancel()
		lag, ok, err := o.CursorLag(ctx)
		if err != nil {
			o.cfg.Logger.WarnContext(ctx, "outbox lag not reported", slog.Any("error", err))
			return nil
		}
		if ok {
			obs.ObserveFloat64(g, max(lag, 0).Seconds())
		}
		return nil
	}, g)
	if err != nil {
		return nil, fmt.Errorf("registering the outbox lag gauge: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}
