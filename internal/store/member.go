package store

import "sync/atomic"

// Member is a node's standing in the cluster: the epoch of its membership row while it is a
// member, 0 while it is not (before it joined, or after the cluster declared it failed). The
// recoverer sets it; acquire and the fire queue read it, so that a node that finds itself
// declared failed stops claiming at once. A nil *Member is always a member of epoch 0: for steps
// used on their own, as in tests.
type Member struct {
	epoch atomic.Int64
}

// Epoch is the current epoch, 0 when not a member.
func (m *Member) Epoch() int64 {
	if m == nil {
		return 0
	}
	return m.epoch.Load()
}

// Joined reports whether the node is a member now (always true for a nil Member).
func (m *Member) Joined() bool { return m == nil || m.epoch.Load() != 0 }

// Set records the epoch of a (re)join, or 0 when the node is out. Setting a nil Member does
// nothing.
func (m *Member) Set(epoch int64) {
	if m != nil {
		m.epoch.Store(epoch)
	}
}
