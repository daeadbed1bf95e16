// Package testsignal lets a loop tell a test what it just did, so the test waits for "this pass
// claimed 3 triggers" instead of polling the database (River's testsignal pattern).
//
// A Signal does nothing until a test calls Init on it; the loops call Signal unconditionally.
package testsignal

import "time"

// capacity is how many values an initialised signal buffers; a test that lets more pile up
// without waiting is told so rather than blocking the loop.
const capacity = 1000

// WaitTimeout is how long Wait waits before failing the test.
const WaitTimeout = 10 * time.Second

// Signal carries values of T from a loop to a test. The zero value is off.
type Signal[T any] struct {
	c chan T
}

// Init turns the signal on. Call it before the loop starts.
func (s *Signal[T]) Init() { s.c = make(chan T, capacity) }

// Signal sends v to the test, if one initialised the signal. It never blocks: a full buffer
// means the test stopped reading, which is a bug in the test.
func (s *Signal[T]) Signal(v T) {
	if s.c == nil {
		return
	}
	select {
	case s.c <- v:
	default:
		panic("testsignal: buffer full; the test does not read this signal")
	}
}

// TB is the part of testing.TB that Wait needs (this package is linked into production
// binaries, which should not import testing).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Wait returns the next value, failing tb after WaitTimeout.
func (s *Signal[T]) Wait(tb TB) T {
	tb.Helper()
	if s.c == nil {
		tb.Fatalf("testsignal: Wait on a signal that was not initialised")
	}
	t := time.NewTimer(WaitTimeout)
	defer t.Stop()
	select {
	case v := <-s.c:
		return v
	case <-t.C:
		tb.Fatalf("testsignal: no signal within %s", WaitTimeout)
	}
	var zero T
	return zero
}

// WaitUntil waits for values until ok returns true for one, and returns it.
func (s *Signal[T]) WaitUntil(tb TB, ok func(T) bool) T {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		if s.c == nil {
			tb.Fatalf("testsignal: Wait on a signal that was not initialised")
		}
		left := time.Until(deadline)
		if left <= 0 {
			tb.Fatalf("testsignal: no matching signal within %s", WaitTimeout)
		}
		t := time.NewTimer(left)
		select {
		case v := <-s.c:
			t.Stop()
			if ok(v) {
				return v
			}
		case <-t.C:
			tb.Fatalf("testsignal: no matching signal within %s", WaitTimeout)
		}
	}
}

// Drain returns the values sent so far and not yet read, without waiting: a test calls it to
// look at what happened before a point and then wait only for what comes after.
func (s *Signal[T]) Drain() []T {
	var vs []T
	for {
		select {
		case v := <-s.c:
			vs = append(vs, v)
		default:
			return vs
		}
	}
}
