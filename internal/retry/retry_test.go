package retry

import (
	"testing"
	"time"
)

func TestDelayDoublesToTheCapWithJitter(t *testing.T) {
	for attempt, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		4: 800 * time.Millisecond, 10: 5 * time.Second, 1000: 5 * time.Second} {
		for range 100 {
			got := Delay(attempt, 100*time.Millisecond, 5*time.Second)
			if got < want*9/10 || got > want*11/10 {
				t.Fatalf("Delay(%d) = %v, want %v ± 10%%", attempt, got, want)
			}
		}
	}
}
