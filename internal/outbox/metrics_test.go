package outbox

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

// TestOutboxLagGauge: the gauge is 0 when the sweep is caught up, the age of the oldest event
// after the cursor when one waits, and 0 again once the sweep passed it.
func TestOutboxLagGauge(t *testing.T) {
	pool, js, ns := setup(t)
	ctx := t.Context()
	relay := New(Config{Namespace: ns, SweepDelay: time.Nanosecond}, pool, js)
	m := metrictest.New(t)
	unregister, err := relay.RegisterMetrics(m.Provider)
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	const name = "agate.scheduler.outbox.lag"
	if _, err := relay.SweepOnce(ctx); err != nil { // past whatever the database held already
		t.Fatal(err)
	}
	if lag, ok := m.Gauge(t, name, nil); !ok || lag != 0 {
		t.Fatalf("caught up: lag %v (reported: %v), want 0", lag, ok)
	}

	// appendOne logs an event timed an hour ago, as one left unpublished that long.
	if err := store.InTx(ctx, pool, func(tx pgx.Tx) error { appendOne(t, ctx, tx, ns, "old"); return nil }); err != nil {
		t.Fatal(err)
	}
	if lag, _ := m.Gauge(t, name, nil); lag < 3599 || lag > 3600+60 {
		t.Errorf("an event an hour old waits: lag %v s, want about 3600", lag)
	}
	if n, err := relay.SweepOnce(ctx); err != nil || n != 1 {
		t.Fatalf("swept %d (err %v), want 1", n, err)
	}
	if lag, _ := m.Gauge(t, name, nil); lag != 0 {
		t.Errorf("after the sweep: lag %v, want 0", lag)
	}
	unregister()
	if lag, ok := m.Gauge(t, name, nil); ok {
		t.Errorf("reported %v after unregister", lag)
	}
}
