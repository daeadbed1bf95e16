package fire_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

// The fires counter and the lateness histogram count what a committed fire transaction did:
// fires, and drops by reason; a transaction that rolled back counts nothing.
func TestFireMetrics(t *testing.T) {
	e := setup(t)
	m := metrictest.New(t)
	e.firer.SetMeterProvider(m.Provider)
	e.f.Job(t, key("j"), false)
	e.f.Trigger(t, key("t"), key("j"), testenv.Repeating(time.Minute), t0)
	e.f.Trigger(t, key("stale"), key("j"), testenv.Repeating(time.Minute), t0)

	// Rolled back after firing: nothing happened.
	failed := errors.New("the transaction fails after the fire")
	err := e.outbox.InTx(t.Context(), func(tx *outbox.Tx) error {
		if err := e.f.Locks.All(t.Context(), tx); err != nil {
			return err
		}
		if _, err := e.firer.Fire(t.Context(), tx, []store.Claim{e.claim(t, key("t"), key("j"), t0, false, false)}); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("InTx: %v", err)
	}
	if n := m.Sum(t, "agate.scheduler.fires", nil); n != 0 {
		t.Fatalf("a rolled back fire was counted: %d", n)
	}

	e.clock.Set(t0.Add(1500 * time.Millisecond)) // the fire is 1.5 s late
	stale := e.claim(t, key("stale"), key("j"), t0, true, false)
	e.f.Exec(t, `update triggers set next_fire_time = $2 where sched_name = $1 and trigger_name = 'stale'`, e.f.Namespace(), t0.Add(time.Hour))
	if n := e.fire(t, e.claim(t, key("t"), key("j"), t0, false, false), stale); n != 1 {
		t.Fatalf("fired %d, want 1", n)
	}
	if n := m.Sum(t, "agate.scheduler.fires", metrictest.Attrs{"outcome": "fired"}); n != 1 {
		t.Errorf("fires{outcome=fired} = %d, want 1", n)
	}
	if n := m.Sum(t, "agate.scheduler.fires", metrictest.Attrs{"outcome": "dropped", "reason": events.DropTriggerChanged}); n != 1 {
		t.Errorf("fires{outcome=dropped, reason=%s} = %d, want 1", events.DropTriggerChanged, n)
	}
	if count, sum := m.Histogram(t, "agate.scheduler.fire.lateness", nil); count != 1 || sum != 1.5 {
		t.Errorf("lateness: %d values summing to %v s, want one of 1.5 s", count, sum)
	}
}
