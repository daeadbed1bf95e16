package complete

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// batchShare is one outcome's share of a message holding several (a worker's batch,
// events.BatchMessage): the message is acknowledged once every outcome in it was recorded,
// and handed back for redelivery when any was not. Redelivered, the outcomes recorded before
// change nothing: an execution ends once, and the log keeps an event once.
type batchShare struct {
	jetstream.Msg
	st *batchState
}

// batchState is what the shares of one message settle together; outcomes of one message may
// be recorded by concurrent transactions (flush).
type batchState struct {
	left  atomic.Int32
	nak   atomic.Bool
	delay atomic.Int64 // the longest delay asked for a redelivery, in nanoseconds
}

func newBatchShare(m jetstream.Msg, n int) batchShare {
	st := &batchState{}
	st.left.Store(int32(n))
	return batchShare{Msg: m, st: st}
}

// settle records one outcome's end: acknowledged (nak false), or to be redelivered after delay.
// The last share to settle acknowledges the message or hands it back.
func (b batchShare) settle(nak bool, delay time.Duration) error {
	if nak {
		for {
			d := b.st.delay.Load()
			if int64(delay) <= d || b.st.delay.CompareAndSwap(d, int64(delay)) {
				break
			}
		}
		b.st.nak.Store(true)
	}
	if b.st.left.Add(-1) > 0 {
		return nil
	}
	switch d := time.Duration(b.st.delay.Load()); {
	case !b.st.nak.Load():
		return b.Msg.Ack()
	case d > 0:
		return b.Msg.NakWithDelay(d)
	default:
		return b.Msg.Nak()
	}
}

func (b batchShare) Ack() error                             { return b.settle(false, 0) }
func (b batchShare) Nak() error                             { return b.settle(true, 0) }
func (b batchShare) NakWithDelay(delay time.Duration) error { return b.settle(true, delay) }
