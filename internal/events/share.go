package events

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Share is one event's share of a message that holds several (a batch: BatchMessage), for the
// readers that settle each event on its own: the message is acknowledged once every share of it
// ended, and handed back for redelivery when any could not, after the longest delay asked. The
// completion step records a worker's batch of outcomes this way, and a worker runs a batch of
// fires; what a redelivery brings back that had ended, each reader tells apart by the event's
// id or fire. Copies of one Share are shares of the same message, each to be settled once.
type Share struct {
	jetstream.Msg
	st *shared
}

// shared is what the shares of one message settle together, from concurrent goroutines.
type shared struct {
	left  atomic.Int32
	nak   atomic.Bool
	delay atomic.Int64 // the longest delay asked for a redelivery, in nanoseconds
}

// NewShare returns the share of each of the n events of m.
func NewShare(m jetstream.Msg, n int) Share {
	st := &shared{}
	st.left.Store(int32(n))
	return Share{Msg: m, st: st}
}

// settle records one event's end: done (nak false), or to be redelivered after delay. The last
// share to settle acknowledges the message or hands it back.
func (s Share) settle(nak bool, delay time.Duration) error {
	if nak {
		for {
			d := s.st.delay.Load()
			if int64(delay) <= d || s.st.delay.CompareAndSwap(d, int64(delay)) {
				break
			}
		}
		s.st.nak.Store(true)
	}
	if s.st.left.Add(-1) > 0 {
		return nil
	}
	switch d := time.Duration(s.st.delay.Load()); {
	case !s.st.nak.Load():
		return s.Msg.Ack()
	case d > 0:
		return s.Msg.NakWithDelay(d)
	default:
		return s.Msg.Nak()
	}
}

// Ack settles the share as done.
func (s Share) Ack() error { return s.settle(false, 0) }

// Nak asks for the message to be delivered again.
func (s Share) Nak() error { return s.settle(true, 0) }

// NakWithDelay asks for the message to be delivered again after delay.
func (s Share) NakWithDelay(delay time.Duration) error { return s.settle(true, delay) }

// TermWithReason settles the share as done: an event of a batch that cannot be read is dropped,
// the message's others are not.
func (s Share) TermWithReason(string) error { return s.settle(false, 0) }
