package events

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Content types of event messages (the Content-Type header): one event in CloudEvents'
// structured mode, or several in its JSON batch format.
const (
	ContentTypeEvent = "application/cloudevents+json"
	ContentTypeBatch = "application/cloudevents-batch+json"
)

// BatchMessage returns one NATS message holding evs, all for one subject, in CloudEvents' JSON
// batch format: an array of envelopes, each with its own traceparent and tracestate (a message
// has one set of headers). id is the batch's Nats-Msg-Id, the same each time this batch is
// published, so that JetStream drops a copy. Workers publish their outcomes this way when
// several wait: nats-server and the workers' costs are per message more than per byte.
func BatchMessage(id uuid.UUID, evs []Event) (*nats.Msg, error) {
	if len(evs) == 0 {
		return nil, errors.New("a batch of events needs at least one event")
	}
	envs := make([]Envelope, len(evs))
	size := 2
	for i, e := range evs {
		if e.Topic != evs[0].Topic {
			return nil, fmt.Errorf("a batch of events goes to one subject: event %s is for %s, not %s", e.ID, e.Topic, evs[0].Topic)
		}
		envs[i] = e.Envelope()
		envs[i].TraceParent, envs[i].TraceState = e.TraceParent, e.TraceState
		size += envs[i].sizeHint() + 1
	}
	body := make([]byte, 0, size)
	body = append(body, '[')
	for i, env := range envs {
		if i > 0 {
			body = append(body, ',')
		}
		var err error
		if body, err = env.AppendJSON(body); err != nil {
			return nil, err
		}
	}
	body = append(body, ']')
	h := make(nats.Header, 2)
	h[jetstream.MsgIDHeader] = []string{id.String()}
	h["Content-Type"] = []string{ContentTypeBatch}
	return &nats.Msg{Subject: evs[0].Topic, Header: h, Data: body}, nil
}

// BatchSize is how many bytes e adds to a batch message's body, about (Envelope.sizeHint): for
// a publisher keeping its batches under the server's largest message.
func BatchSize(e Event) int {
	return e.Envelope().sizeHint() + len(e.TraceParent) + len(e.TraceState) + 32 // 32: the two members' names
}

// Batches splits items into the batches of events to publish: by subject, in order, each within
// max events and limit bytes of BatchSize (an event larger than limit goes alone). event gives
// an item's event. The split depends on nothing but the items, so the same items make the same
// batches each time: a publisher that forms them again keeps their BatchIDs.
func Batches[T any](items []T, event func(T) Event, max, limit int) [][]T {
	type open struct {
		at, size int // index in out; bytes so far
	}
	var out [][]T
	bySubject := map[string]open{}
	for _, it := range items {
		e := event(it)
		size := BatchSize(e)
		b, ok := bySubject[e.Topic]
		if !ok || len(out[b.at]) >= max || b.size+size > limit {
			b = open{at: len(out)}
			out = append(out, nil)
		}
		out[b.at] = append(out[b.at], it)
		b.size += size
		bySubject[e.Topic] = b
	}
	return out
}

// batchIDs is the name space of BatchID's name-based UUIDs.
var batchIDs = uuid.MustParse("6f1b2c1e-8a7d-4c3e-9b0a-5d2f4e6a8c10")

// BatchID is a Nats-Msg-Id for a batch of evs that depends only on their ids and order (a UUID
// version 5 of them): whoever publishes the same batch again, the node that formed it or the
// outbox sweep after it died, publishes it under the same id, and JetStream drops the copy.
func BatchID(evs []Event) uuid.UUID {
	name := make([]byte, 0, 16*len(evs))
	for _, e := range evs {
		name = append(name, e.ID[:]...)
	}
	return uuid.NewSHA1(batchIDs, name)
}

// BatchLimit is the most bytes of events in one batch message on nc: the server's largest
// message, less room for the headers and the batch's brackets.
func BatchLimit(nc *nats.Conn) int {
	limit := int(nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20 // not connected: the server's default; the publish fails and says why
	}
	return limit - 512
}

// Bodies returns the envelopes a message holds: its body, or each element of a batch
// (Content-Type ContentTypeBatch). Every reader of Agate's streams uses it: a node publishes a
// transaction's fires of a job type, or its events, and a worker the outcomes that end
// together, several in one message. The elements are slices of body, not copies. A batch is
// split at the commas between its elements without reading them: each is read, and checked, by
// the decoder that takes it (Decode), so an element that is not a readable event fails alone.
// Validating every element here as well was a tenth of a worker's CPU in a burst.
func Bodies(h nats.Header, body []byte) ([][]byte, error) {
	if h.Get("Content-Type") != ContentTypeBatch {
		return [][]byte{body}, nil
	}
	malformed := func(why string) error { return fmt.Errorf("batch of events is not a JSON array: %s", why) }
	b := trimSpace(body)
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, malformed("it does not start with [ and end with ]")
	}
	var out [][]byte
	depth, start := 0, 1
	for i := 1; i < len(b)-1; i++ {
		switch b[i] {
		case '"':
			end := stringEnd(b[:len(b)-1], i+1)
			if end < 0 {
				return nil, malformed("a string is not closed")
			}
			i = end
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth < 0 {
				return nil, malformed("a bracket closes what was not opened")
			}
		case ',':
			if depth == 0 {
				out, start = append(out, trimSpace(b[start:i])), i+1
			}
		}
	}
	if depth != 0 {
		return nil, malformed("a bracket is not closed")
	}
	last := trimSpace(b[start : len(b)-1])
	if len(out) == 0 && len(last) == 0 {
		return nil, errors.New("batch of events is empty")
	}
	return append(out, last), nil
}

// stringEnd is the index in b of the quote that closes the string whose content starts at i,
// -1 when none does: the next quote not escaped, found with bytes.IndexByte rather than byte by
// byte (most of an event is strings).
func stringEnd(b []byte, i int) int {
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return -1
		}
		q += i
		escapes := 0
		for j := q - 1; j >= i && b[j] == '\\'; j-- {
			escapes++
		}
		if escapes%2 == 0 {
			return q
		}
		i = q + 1
	}
}

// trimSpace trims JSON's whitespace from both ends of b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
