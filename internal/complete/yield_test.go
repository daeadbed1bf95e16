package complete

import (
	"testing"
	"time"
)

// The consumer waits while the fire path is behind, at most max in a row; once it waited that
// long it applies batches until one comes short (caught up), and only then waits again.
func TestYielderWaitsOutABacklogForAtMostMax(t *testing.T) {
	backlogged := false
	y := yielder{backlogged: func() bool { return backlogged }, max: time.Second}
	t0 := time.Unix(1000, 0)

	if d := y.wait(t0); d != 0 {
		t.Fatalf("no backlog: wait %s, want 0", d)
	}
	backlogged = true
	if d := y.wait(t0); d != yieldPoll || !y.waiting() {
		t.Fatalf("backlog begins: wait %s, waiting %v, want %s and true", d, y.waiting(), yieldPoll)
	}
	if d := y.wait(t0.Add(998 * time.Millisecond)); d != 2*time.Millisecond {
		t.Fatalf("2ms before max: wait %s, want 2ms", d)
	}
	if d := y.wait(t0.Add(time.Second)); d != 0 {
		t.Fatalf("max reached: wait %s, want 0", d)
	}
	// Full batches: the consumer keeps applying while the backlog lasts.
	if d := y.wait(t0.Add(5 * time.Second)); d != 0 {
		t.Fatalf("after max, not caught up: wait %s, want 0", d)
	}
	y.caughtUp()
	if d := y.wait(t0.Add(6 * time.Second)); d != yieldPoll {
		t.Fatalf("caught up, still behind: wait %s, want %s (a new wait)", d, yieldPoll)
	}
	// The backlog ends: fetch at once, and a later backlog gets a whole wait of its own.
	backlogged = false
	if d := y.wait(t0.Add(6500 * time.Millisecond)); d != 0 || y.waiting() {
		t.Fatalf("backlog gone: wait %s, waiting %v, want 0 and false", d, y.waiting())
	}
	backlogged = true
	if d := y.wait(t0.Add(7 * time.Second)); d != yieldPoll {
		t.Fatalf("new backlog: wait %s, want %s", d, yieldPoll)
	}
	if d := y.wait(t0.Add(7*time.Second + 999*time.Millisecond)); d != time.Millisecond {
		t.Fatalf("new backlog, 1ms before max: wait %s, want 1ms", d)
	}
}

// A consumer without a fire path to yield to (Backlogged nil) never waits.
func TestYielderWithoutBacklogSignalNeverWaits(t *testing.T) {
	y := yielder{max: time.Second}
	if d := y.wait(time.Unix(1000, 0)); d != 0 {
		t.Fatalf("wait %s, want 0", d)
	}
}

// The fires waiting for a worker count only while busy (waiting, or after a fetch that came back
// full): a steady flow, whose fetches come back short, asks JetStream nothing.
func TestBehindAsksForWaitingFiresOnlyAfterAFullFetch(t *testing.T) {
	acquireBehind, asked := false, 0
	c := &Consumer{cfg: Config{
		Backlogged:   func() bool { return acquireBehind },
		FiresWaiting: func() bool { asked++; return true },
	}}
	if c.behind(false) || asked != 0 {
		t.Fatalf("not busy: behind %v, waiting fires asked %d times, want false and 0", c.behind(false), asked)
	}
	if !c.behind(true) || asked != 1 {
		t.Fatalf("busy, fires waiting: behind %v, asked %d times, want true and 1", c.behind(true), asked)
	}
	acquireBehind = true
	if !c.behind(false) || asked != 1 {
		t.Fatalf("the acquire loop behind: behind %v, asked %d times, want true and still 1", c.behind(false), asked)
	}
	if (&Consumer{}).behind(true) {
		t.Error("a consumer with neither signal is behind")
	}
}
