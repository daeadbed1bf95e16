package fire

import (
	"context"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

// Counting a committed fire transaction allocates nothing per fire: the attribute sets are made
// once, and a batch of 500 fires costs what a batch of one does.
func TestFireMetricsAllocateNothingPerFire(t *testing.T) {
	m := newMetrics(metrictest.New(t).Provider)
	now := time.Now()
	batch := func(n int) ([]firing, []drop) {
		fires := make([]firing, n)
		for i := range fires {
			fires[i].claim = store.Claim{SchedTime: now.Add(-time.Duration(i) * time.Millisecond)}
		}
		return fires, []drop{{reason: events.DropJobBusy}}
	}
	ctx := context.Background()
	allocs := map[int]float64{}
	for _, n := range []int{1, 500} {
		fires, drops := batch(n)
		m.committed(ctx, fires, drops, now) // the series exist from the first measurement on
		allocs[n] = testing.AllocsPerRun(20, func() { m.committed(ctx, fires, drops, now) })
	}
	if allocs[500] > allocs[1] {
		t.Errorf("allocations per committed transaction: %v for 1 fire, %v for 500: the fire path allocates per fire",
			allocs[1], allocs[500])
	}
	t.Logf("allocations per committed transaction: %v (1 fire), %v (500 fires)", allocs[1], allocs[500])
}
