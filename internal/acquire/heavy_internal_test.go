package acquire

import (
	"testing"
	"time"

	"github.com/agatesched/agate/internal/store"
)

// A heavy flow is judged by the claims' density over the fire-ahead window, not only by their
// count: a flow that starts within the window fills only its end at first.
func TestHeavyJudgesTheWindowByTheClaimsDensity(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const ahead, limit = 200 * time.Millisecond, 500
	// n claims, evenly spread from now+from over span.
	claims := func(n int, from, span time.Duration) []store.Claim {
		cs := make([]store.Claim, n)
		for i := range cs {
			cs[i].SchedTime = now.Add(from + span*time.Duration(i)/time.Duration(max(n-1, 1)))
		}
		return cs
	}
	for _, c := range []struct {
		name   string
		claims []store.Claim
		want   bool
	}{
		{"none", nil, false},
		{"a full batch", claims(limit, 0, ahead), true},
		{"1,000/s over the whole window", claims(200, 0, ahead), false},
		{"5,000/s starting 150 ms ahead: 250 over its last 50 ms", claims(250, 150*time.Millisecond, 50*time.Millisecond), true},
		{"1,000/s starting 150 ms ahead: 50 over its last 50 ms", claims(50, 150*time.Millisecond, 50*time.Millisecond), false},
		{"100 due at one instant", claims(100, 100*time.Millisecond, 0), true},
		{"20 due at one instant", claims(20, 100*time.Millisecond, 0), false},
	} {
		if got := heavy(c.claims, now, ahead, limit); got != c.want {
			t.Errorf("%s: heavy %v, want %v", c.name, got, c.want)
		}
	}
}
