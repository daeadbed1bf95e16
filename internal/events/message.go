package events

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Message returns the NATS message of e: the CloudEvents envelope as body, Nats-Msg-Id = event
// id for JetStream's de-duplication, and the W3C trace headers.
func Message(e Event) (*nats.Msg, error) {
	body, err := json.Marshal(e.Envelope())
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", e.ID, err)
	}
	msg := nats.NewMsg(e.Topic)
	msg.Data = body
	msg.Header.Set(jetstream.MsgIDHeader, e.ID.String())
	msg.Header.Set("Content-Type", "application/cloudevents+json")
	if e.TraceParent != "" {
		msg.Header.Set("traceparent", e.TraceParent)
		if e.TraceState != "" {
			msg.Header.Set("tracestate", e.TraceState)
		}
	}
	return msg, nil
}

// Decode reads a CloudEvents message body into its envelope and data (a pointer), in one pass:
// the returned envelope's Data is nil (DecodeRaw keeps it). Parsing the envelope and then its
// data again took 40 % of a worker's CPU in the benchmark.
func Decode(body []byte, data any) (Envelope, error) {
	var wire struct {
		Envelope
		Data any `json:"data"` // shadows Envelope.Data: decoded straight into the caller's value
	}
	wire.Data = data
	if err := json.Unmarshal(body, &wire); err != nil {
		return wire.Envelope, fmt.Errorf("event is not a CloudEvents JSON envelope with %T data: %w", data, err)
	}
	if _, err := uuid.Parse(wire.ID); err != nil {
		return wire.Envelope, fmt.Errorf("event id %q is not a UUID", wire.ID)
	}
	return wire.Envelope, nil
}

// DecodeRaw is Decode for a caller that keeps the event's data as it came (Envelope.Data), to
// log it unchanged.
func DecodeRaw(body []byte, data any) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("event is not a CloudEvents JSON envelope: %w", err)
	}
	if _, err := uuid.Parse(env.ID); err != nil {
		return env, fmt.Errorf("event id %q is not a UUID", env.ID)
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return env, fmt.Errorf("event %s (%s) has malformed data: %w", env.ID, env.Type, err)
	}
	return env, nil
}
