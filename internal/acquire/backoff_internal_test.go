package acquire

import (
	"testing"
	"time"
)

// The wait after passes that left due triggers in held partitions doubles only while they claim
// nothing, and starts over after a pass that did.
func TestBusyBackoffGrowsOnlyWhilePassesClaimNothing(t *testing.T) {
	var b busyBackoff
	for i, c := range []struct {
		claimed int
		want    time.Duration
	}{
		{0, busyRetryMin}, {0, 2 * busyRetryMin}, {0, 4 * busyRetryMin},
		{3, busyRetryMin}, {5, busyRetryMin}, {0, 2 * busyRetryMin},
	} {
		if got := b.next(c.claimed); got != c.want {
			t.Fatalf("pass %d (claimed %d): wait %v, want %v", i, c.claimed, got, c.want)
		}
	}
	for range 10 {
		b.next(0)
	}
	if got := b.next(0); got != busyRetryMax {
		t.Fatalf("after many passes that claimed nothing: wait %v, want the most, %v", got, busyRetryMax)
	}
	b.reset()
	if got := b.next(0); got != busyRetryMin {
		t.Fatalf("after a reset: wait %v, want %v", got, busyRetryMin)
	}
}
