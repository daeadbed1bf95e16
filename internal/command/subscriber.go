package command

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
)

// streamSubscriber is a watermill Subscriber over one shared durable JetStream consumer, so the
// command consumer runs under a watermill Router (middlewares, logging, graceful close) while
// keeping JetStream's guarantees: a message is acked only after its handler returned nil, and a
// nacked one is redelivered after nakDelay.
//
// watermill-nats's own JetStream subscriber is not used: it derives stream and consumer names
// from the topic, whereas docs/contract.md fixes them (AGATE_<ns>_COMMANDS, durable
// "scheduler-commands") so that every node shares one consumer.
type streamSubscriber struct {
	cons     jetstream.Consumer
	nakDelay time.Duration
	// maxInFlight is how many messages may be handed out and not yet acked or nacked: the
	// router's handlers run them at once, so that they are applied in batches.
	maxInFlight int

	mu     sync.Mutex
	closed bool
	stops  []func()
}

// Subscribe delivers the consumer's messages, in stream order, with up to maxInFlight of them
// unacknowledged at once; topic is informational.
func (s *streamSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	inFlight := make(chan struct{}, max(s.maxInFlight, 1))
	// The callback runs on one goroutine per consume context, so messages are handed out in order.
	cc, err := s.cons.Consume(func(m jetstream.Msg) {
		wm := message.NewMessage(uuid.NewString(), m.Data())
		wm.Metadata.Set(metaSubject, m.Subject())
		if md, err := m.Metadata(); err == nil {
			wm.Metadata.Set(metaDeliveries, strconv.FormatUint(md.NumDelivered, 10))
			wm.Metadata.Set(metaSequence, strconv.FormatUint(md.Sequence.Stream, 10))
		}
		if tp := m.Headers().Get("traceparent"); tp != "" {
			wm.Metadata.Set("traceparent", tp)
		}
		wm.SetContext(ctx)
		select {
		case inFlight <- struct{}{}:
		case <-ctx.Done():
			return // not acked: redelivered to another node after AckWait
		}
		select {
		case out <- wm:
		case <-ctx.Done():
			<-inFlight
			return
		}
		go func() {
			defer func() { <-inFlight }()
			select {
			case <-wm.Acked():
				_ = m.Ack()
			case <-wm.Nacked():
				_ = m.NakWithDelay(s.nakDelay)
			case <-ctx.Done():
			}
		}()
	}, jetstream.PullMaxMessages(max(s.maxInFlight, 64)))
	if err != nil {
		cancel()
		return nil, err
	}
	stop := func() {
		cancel()
		cc.Stop()
		<-cc.Closed() // no callback runs after this, so out can be closed
		close(out)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		stop()
		return out, nil
	}
	var once sync.Once
	s.stops = append(s.stops, func() { once.Do(stop) })
	go func() {
		<-ctx.Done()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, f := range s.stops {
			f()
		}
		s.stops = nil
	}()
	return out, nil
}

// Close stops every subscription and closes their channels.
func (s *streamSubscriber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, f := range s.stops {
		f()
	}
	s.stops = nil
	return nil
}

// Metadata keys: the NATS subject (which names the command), how many times JetStream has
// delivered the message, and its stream sequence.
const (
	metaSubject    = "nats_subject"
	metaDeliveries = "deliveries"
	metaSequence   = "stream_sequence"
)
