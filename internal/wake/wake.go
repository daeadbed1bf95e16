// Package wake is the one signal by which a step tells the acquire loop that triggers changed:
// a command scheduled one, a fire advanced one, a completion released one. The node creates one
// Signal and hands it to every step, so no step needs to know the acquirer.
package wake

import (
	"sync"
	"time"
)

// Signal wakes one waiting loop. Several notifications before the loop looks collapse into one.
// A nil *Signal ignores notifications, so a step used without a node needs no stub.
//
// The loop tells the signal when its next pass is planned (Planned), so that a step that knows
// when the trigger it changed is due (NotifyDue) wakes the loop only when that pass would be too
// late: a command scheduling a trigger due in an hour does not cost a pass over every partition.
type Signal struct {
	c chan struct{}

	mu      sync.Mutex
	next    time.Time // the loop's next planned pass; zero while it runs a pass (or never said)
	pending time.Time // earliest due time notified while the loop ran a pass
}

// New returns a Signal.
func New() *Signal { return &Signal{c: make(chan struct{}, 1)} }

// Notify wakes the loop, or leaves a wake-up for its next wait. It never blocks.
func (s *Signal) Notify() {
	if s == nil {
		return
	}
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// NotifyDue is Notify for a change that made a trigger due at due (by the node clock the loop
// plans with): it wakes the loop only when its next planned pass is after due. While the loop
// runs a pass (which may have read the triggers before the change), due is kept for the loop's
// next plan instead (Planned returns it): under a steady flow of commands the loop does not run
// pass after pass for triggers due in an hour. It never blocks.
func (s *Signal) NotifyDue(due time.Time) {
	if s == nil {
		return
	}
	s.mu.Lock()
	next, running := s.next, s.next.IsZero()
	if running && (s.pending.IsZero() || due.Before(s.pending)) {
		s.pending = due
	}
	s.mu.Unlock()
	if !running && due.Before(next) {
		s.Notify()
	}
}

// Planned is called by the loop: with the time of its next pass before it waits, and with the
// zero time when it wakes up to run a pass. Before a wait it returns the earliest due time
// notified while the loop ran (zero when none): the loop must plan its pass for that too.
func (s *Signal) Planned(next time.Time) (due time.Time) {
	if s == nil {
		return time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = next
	if next.IsZero() {
		return time.Time{}
	}
	due, s.pending = s.pending, time.Time{}
	return due
}

// C is the channel the loop waits on. A nil Signal's channel never fires.
func (s *Signal) C() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}
