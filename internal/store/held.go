package store

import (
	"sync"
	"time"
)

// HeldWait is how long the fire queue and the completion consumer wait for a lock partition
// that another transaction holds before they set it aside (HeldPartitions). Other nodes'
// transactions hold a partition for milliseconds; one that stays is a node stopped in the
// middle of a transaction (SIGSTOP, a long pause, a connection cut without a reset), whose lock
// lasts until it goes on or its connection dies.
const HeldWait = 250 * time.Millisecond

// HeldWarnAfter is how long a partition stays held before HeldPartitions.Hold says to warn.
const HeldWarnAfter = 5 * time.Second

// HeldPartitions remembers the lock partitions that a loop found held longer than HeldWait, so
// that it works in the others first and tries them again HeldWait later. Waiting for them
// instead stalled the loop, and every partition's fires or completions behind the one held: a
// node stopped in a transaction made others' fires seconds late (docs/performance-history.md).
// The zero value is ready; it is safe for concurrent use.
type HeldPartitions struct {
	mu     sync.Mutex
	until  map[int]time.Time // set aside until
	since  map[int]time.Time // found held, without a transaction taking it since
	warned map[int]bool
}

// Hold sets partition p aside: it was found held at now. It returns how long p has been held
// and whether to warn that it is (once HeldWarnAfter, once until it is taken again).
func (h *HeldPartitions) Hold(p int, now time.Time) (heldFor time.Duration, warn bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.until == nil {
		h.until, h.since, h.warned = map[int]time.Time{}, map[int]time.Time{}, map[int]bool{}
	}
	h.until[p] = now.Add(HeldWait)
	since, ok := h.since[p]
	if !ok {
		since = now.Add(-HeldWait) // it was waited for that long before
		h.since[p] = since
	}
	heldFor = now.Sub(since)
	if heldFor >= HeldWarnAfter && !h.warned[p] {
		h.warned[p] = true
		return heldFor, true
	}
	return heldFor, false
}

// Taken says a transaction took partitions ps: they are no longer set aside.
func (h *HeldPartitions) Taken(ps ...int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.until) == 0 {
		return
	}
	for _, p := range ps {
		delete(h.until, p)
		delete(h.since, p)
		delete(h.warned, p)
	}
}

// Held reports whether partition p is set aside at now.
func (h *HeldPartitions) Held(p int, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Before(h.until[p])
}

// Next is when the first partition set aside at now may be tried again; zero if none is.
func (h *HeldPartitions) Next(now time.Time) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next time.Time
	for _, u := range h.until {
		if now.Before(u) && (next.IsZero() || u.Before(next)) {
			next = u
		}
	}
	return next
}
