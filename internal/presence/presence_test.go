package presence

import (
	"testing"
	"time"
)

// A roster lists the workers heard from within three of their intervals, drops one that
// stopped at once and one that went silent after that, and says how long ago each was heard.
func TestRoster(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	r := NewRoster(func() time.Time { return now })
	r.Observe(Worker{Instance: "b", JobTypes: []string{"http"}, Interval: "1s"})
	r.Observe(Worker{Instance: "a", JobTypes: []string{"noop"}, Interval: "1s", InFlight: 2})
	r.Observe(Worker{Instance: "c", Interval: "1s"})
	r.Observe(Worker{Instance: "c", Stopping: true})
	now = now.Add(1500 * time.Millisecond)
	got := r.Workers()
	if len(got) != 2 || got[0].Instance != "a" || got[1].Instance != "b" || got[0].InFlight != 2 || got[0].SinceSeen != "1.5s" {
		t.Fatalf("roster %+v, want a then b, seen 1.5s ago", got)
	}
	r.Observe(Worker{Instance: "a", Interval: "1s"})
	now = now.Add(2 * time.Second) // b: 3.5 s, more than 3 intervals
	if got := r.Workers(); len(got) != 1 || got[0].Instance != "a" {
		t.Fatalf("roster %+v, want a alone once b went silent", got)
	}
}
