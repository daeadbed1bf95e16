package events

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// settled records how a message was settled; the methods a share does not override panic
// through the nil interface it embeds.
type settled struct {
	jetstream.Msg
	acks, naks int
	delay      time.Duration
}

func (s *settled) Ack() error                             { s.acks++; return nil }
func (s *settled) Nak() error                             { s.naks++; return nil }
func (s *settled) NakWithDelay(delay time.Duration) error { s.naks++; s.delay = delay; return nil }

// A batch's message is settled once, by its last outcome: acknowledged when all were recorded,
// handed back with the longest delay asked when any was not.
func TestShareSettlesTheMessageOnce(t *testing.T) {
	for _, tc := range []struct {
		name       string
		settle     []func(Share) error
		acks, naks int
		delay      time.Duration
	}{
		{"all recorded", []func(Share) error{Share.Ack, Share.Ack, Share.Ack}, 1, 0, 0},
		{"one failed", []func(Share) error{Share.Ack,
			func(b Share) error { return b.NakWithDelay(time.Second) }, Share.Ack}, 0, 1, time.Second},
		{"given back and failed", []func(Share) error{
			func(b Share) error { return b.NakWithDelay(time.Second) }, Share.Nak}, 0, 1, time.Second},
		{"given back", []func(Share) error{Share.Ack, Share.Nak}, 0, 1, 0},
		{"one unreadable", []func(Share) error{Share.Ack, func(b Share) error { return b.TermWithReason("") }}, 1, 0, 0},
	} {
		m := &settled{}
		share := NewShare(m, len(tc.settle))
		for i, settle := range tc.settle {
			if err := settle(share); err != nil {
				t.Fatal(err)
			}
			if last := i == len(tc.settle)-1; !last && m.acks+m.naks > 0 {
				t.Fatalf("%s: the message was settled by outcome %d of %d", tc.name, i+1, len(tc.settle))
			}
		}
		if m.acks != tc.acks || m.naks != tc.naks || m.delay != tc.delay {
			t.Errorf("%s: %d acks, %d naks after %s; want %d, %d after %s", tc.name, m.acks, m.naks, m.delay, tc.acks, tc.naks, tc.delay)
		}
	}
}
