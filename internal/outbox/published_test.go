package outbox

import "testing"

// PublishedBelow never passes a transaction that may have events JetStream lacks: one still
// running (by the lower bound it started with, then its xid), one whose publish is pending, one
// whose commit answer was lost until the sweep passed it.
func TestPublishedBelow(t *testing.T) {
	p := newPublished()
	want := func(w uint64) {
		t.Helper()
		if got := p.below(); got != w {
			t.Fatalf("below() = %d, want %d", got, w)
		}
	}
	want(1)
	p.seen(100, 0)
	want(101)

	running := p.begin() // its xid is not known yet: it can only be above 100
	want(101)
	p.seen(120, 0) // another transaction's xid; running may still have got 101
	want(101)
	p.assigned(running, 130)
	want(130)
	p.done(running) // JetStream stored its events
	want(131)

	lost := p.begin()
	p.assigned(lost, 140)
	p.failed(lost) // the commit's answer was lost: its events may be in the log only
	p.seen(150, 0)
	want(140)
	p.seen(150, 140) // the sweep's cursor is at 140: it may not have passed all of 140's rows
	want(140)
	p.seen(150, 141)
	want(151)

	aborted := p.begin()
	p.failed(aborted) // failed before its Append returned: nothing of it can commit
	want(151)
}
