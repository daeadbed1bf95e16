package complete

import (
	"testing"
	"time"
)

// Outcomes that take partition locks wait while the node fires a heavy flow, until they are a
// few batches or have waited Yield; without a heavy flow they go at once.
func TestHeldOutcomesWaitOnlyWhileTheFlowIsHeavy(t *testing.T) {
	heavy := true
	c := New(Config{Batch: 3, Yield: time.Second, Heavy: func() bool { return heavy }}, nil, nil)
	since := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	c.held, c.heldSince = make([]pending, 2), since
	for _, tc := range []struct {
		name   string
		heavy  bool
		held   int
		after  time.Duration
		expect bool
	}{
		{"heavy flow, fewer than a batch, waited less than Yield", true, 2, 500 * time.Millisecond, true},
		{"heavy flow, waited Yield", true, 2, time.Second, false},
		{"heavy flow, a batch", true, 3, 0, true},
		{"heavy flow, heldBatches batches", true, 3 * heldBatches, 0, false},
		{"light flow", false, 2, 0, false},
	} {
		heavy, c.held = tc.heavy, make([]pending, tc.held)
		if got := c.holding(since.Add(tc.after)); got != tc.expect {
			t.Errorf("%s: holding %v, want %v", tc.name, got, tc.expect)
		}
	}
	c.cfg.Heavy = nil
	if c.holding(since) {
		t.Error("a consumer told of no flow holds its outcomes")
	}
}
