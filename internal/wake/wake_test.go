package wake

import (
	"testing"
	"time"
)

func woken(s *Signal) bool {
	select {
	case <-s.C():
		return true
	default:
		return false
	}
}

func TestNotifyDue(t *testing.T) {
	s := New()
	now := time.Now()
	// Running a pass: nothing wakes, the due time is handed to the next plan.
	s.NotifyDue(now.Add(time.Hour))
	s.NotifyDue(now.Add(time.Minute))
	if woken(s) {
		t.Fatal("woken while running a pass")
	}
	if due := s.Planned(now.Add(time.Second)); !due.Equal(now.Add(time.Minute)) {
		t.Fatalf("Planned returned %v, want the earliest due time notified during the pass", due)
	}
	// Waiting for a pass in a second.
	s.NotifyDue(now.Add(time.Hour))
	if woken(s) {
		t.Fatal("a trigger due after the next pass woke the loop")
	}
	s.NotifyDue(now.Add(time.Millisecond))
	if !woken(s) {
		t.Fatal("a trigger due before the next pass did not wake the loop")
	}
	if due := s.Planned(time.Time{}); !due.IsZero() {
		t.Fatalf("waking returned %v", due)
	}
	var nilSignal *Signal
	nilSignal.NotifyDue(now)
	_ = nilSignal.Planned(now)
}
