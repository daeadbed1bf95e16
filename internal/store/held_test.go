package store

import (
	"testing"
	"time"
)

// A partition found held is set aside for HeldWait, tried again after, and warned about once
// it has been held HeldWarnAfter; taking it ends all that.
func TestHeldPartitions(t *testing.T) {
	var h HeldPartitions
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	if h.Held(3, t0) || !h.Next(t0).IsZero() {
		t.Fatal("an empty set holds a partition")
	}
	if d, warn := h.Hold(3, t0); warn || d != HeldWait {
		t.Fatalf("first Hold = %s, %v; want %s, no warning", d, warn, HeldWait)
	}
	if !h.Held(3, t0) || h.Held(2, t0) {
		t.Fatal("Held: want partition 3 only")
	}
	if got := h.Next(t0); !got.Equal(t0.Add(HeldWait)) {
		t.Fatalf("Next = %s, want %s", got, t0.Add(HeldWait))
	}
	if h.Held(3, t0.Add(HeldWait)) || !h.Next(t0.Add(HeldWait)).IsZero() {
		t.Fatal("partition 3 still set aside after HeldWait")
	}
	warnings := 0
	for at := t0; at.Before(t0.Add(2 * HeldWarnAfter)); at = at.Add(HeldWait) {
		if _, warn := h.Hold(3, at); warn {
			warnings++
			if held := at.Sub(t0) + HeldWait; held < HeldWarnAfter {
				t.Fatalf("warned after %s held, before %s", held, HeldWarnAfter)
			}
		}
	}
	if warnings != 1 {
		t.Fatalf("%d warnings for one partition held %s, want 1", warnings, 2*HeldWarnAfter)
	}
	h.Taken(1, 3)
	if h.Held(3, t0.Add(2*HeldWarnAfter)) {
		t.Fatal("a partition taken is still set aside")
	}
	if d, warn := h.Hold(3, t0.Add(time.Minute)); warn || d != HeldWait {
		t.Fatalf("Hold after Taken = %s, %v; want a new run: %s, no warning", d, warn, HeldWait)
	}
}
