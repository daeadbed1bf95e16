// Package wake is the one signal by which a step tells the acquire loop that triggers changed:
// a command scheduled one, a fire advanced one, a completion released one. The node creates one
// Signal and hands it to every step, so no step needs to know the acquirer.
package wake

// Signal wakes one waiting loop. Several notifications before the loop looks collapse into one.
// A nil *Signal ignores notifications, so a step used without a node needs no stub.
type Signal struct {
	c chan struct{}
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

// C is the channel the loop waits on. A nil Signal's channel never fires.
func (s *Signal) C() <-chan struct{} {
	if s == nil {
		return nil
	}
	return s.c
}
