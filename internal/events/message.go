package events

import (
	"bytes"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Message returns the NATS message of e: the CloudEvents envelope as body, Nats-Msg-Id = event
// id for JetStream's de-duplication, and the W3C trace headers.
func Message(e Event) (*nats.Msg, error) {
	env := e.Envelope()
	body, err := env.AppendJSON(make([]byte, 0, env.sizeHint()))
	if err != nil {
		return nil, err
	}
	h := make(nats.Header, 4)
	h[jetstream.MsgIDHeader] = []string{env.ID}
	h["Content-Type"] = []string{ContentTypeEvent}
	if e.TraceParent != "" {
		h["traceparent"] = []string{e.TraceParent}
		if e.TraceState != "" {
			h["tracestate"] = []string{e.TraceState}
		}
	}
	return &nats.Msg{Subject: e.Topic, Header: h, Data: body}, nil
}

// Decode reads a CloudEvents message body into its envelope and data (a pointer), in one pass:
// the returned envelope's Data is nil (DecodeRaw keeps it). Parsing the envelope and then its
// data again took 40 % of a worker's CPU in the benchmark.
//
// A JobFired or JobResult in the layout Agate writes is read by the canonical reader
// (canonical.go), at a third of the cost; any other body with
// github.com/go-json-experiment/json (encoding/json/v2 as a module): 2.7 times as fast as
// encoding/json on a JobFired, with a fifth of the allocations, and its errors name the member
// that failed ("/data/fireId") without quoting the message. It matches member names exactly, as
// docs/contract.md spells them, and refuses a name given twice.
func Decode(body []byte, data any) (Envelope, error) {
	if env, _, ok := decodeCanonical(body, data); ok {
		return env, checkID(env)
	}
	env, _, err := decode(body, data, data)
	return env, err
}

// decode is Decode with the data decoded into d (a pointer, or a value whose pointer is a
// json.UnmarshalerFrom), which it returns; the error names named's type.
func decode[D any](body []byte, d D, named any) (Envelope, D, error) {
	var wire struct {
		Envelope
		Data D `json:"data"` // shadows Envelope.Data: decoded straight into the caller's value
	}
	wire.Data = d
	if err := jsonv2.Unmarshal(body, &wire); err != nil {
		return wire.Envelope, wire.Data, fmt.Errorf("event is not a CloudEvents JSON envelope with %T data: %w", named, err)
	}
	return wire.Envelope, wire.Data, checkID(wire.Envelope)
}

// checkID refuses an event whose id is not a UUID.
func checkID(env Envelope) error {
	if _, err := uuid.Parse(env.ID); err != nil {
		return fmt.Errorf("event id %q is not a UUID", env.ID)
	}
	return nil
}

// DecodeRaw is Decode for a caller that keeps the event's data as it came (Envelope.Data, a
// slice of body), to log it unchanged. It reads body once, as Decode does: parsing the envelope
// and then its data again was half of what the completion step paid to read an outcome.
func DecodeRaw(body []byte, data any) (Envelope, error) {
	if env, raw, ok := decodeCanonical(body, data); ok {
		env.Data = raw
		return env, checkID(env)
	}
	env, raw, err := decode(body, rawData{src: body, into: data}, data)
	if err != nil {
		return env, err
	}
	if raw.raw == nil {
		return env, fmt.Errorf("event %s (%s) has no data", env.ID, env.Type)
	}
	env.Data = raw.raw
	return env, nil
}

// rawData decodes a JSON value into the value into points to and keeps the value's bytes as
// they are in src, the input being decoded: one pass over them.
type rawData struct {
	src  []byte
	into any
	raw  []byte
}

// UnmarshalJSONFrom implements jsonv2.UnmarshalerFrom.
func (d *rawData) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	// The offset is just past the member's name: the colon and any white space come first.
	start := dec.InputOffset()
	if err := jsonv2.UnmarshalDecode(dec, d.into); err != nil {
		return err
	}
	d.raw = bytes.TrimLeft(d.src[start:dec.InputOffset()], ": \t\r\n")
	return nil
}

// sizeHint is about the length of the envelope's JSON: its members' names, punctuation and time
// (at most 160 bytes) and its strings, unescaped. Sized by 256 + the data, as before, a JobFired's
// buffer was grown once more, a second copy of every event on the bus.
func (env Envelope) sizeHint() int {
	return 160 + len(env.ID) + len(env.Type) + len(env.Source) + len(env.Subject) + len(env.DataContentType) +
		len(env.Data) + len(env.TraceParent) + len(env.TraceState)
}

// AppendJSON appends the envelope's JSON to b: the bytes encoding/json gives, apart from data,
// which is appended as it is (valid JSON from json.Marshal or the log), not compacted again.
// Encoding/json's pass over the data to check and compact it was most of the cost of an event
// on the bus.
func (env Envelope) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"specversion":`...)
	b = appendString(b, env.SpecVersion)
	b = append(b, `,"id":`...)
	b = appendString(b, env.ID)
	b = append(b, `,"type":`...)
	b = appendString(b, env.Type)
	b = append(b, `,"source":`...)
	b = appendString(b, env.Source)
	b = append(b, `,"time":`...)
	b, err := appendTime(b, env.Time)
	if err != nil {
		return b, fmt.Errorf("encoding event %s: %w", env.ID, err)
	}
	if env.Subject != "" {
		b = append(b, `,"subject":`...)
		b = appendString(b, env.Subject)
	}
	b = append(b, `,"datacontenttype":`...)
	b = appendString(b, env.DataContentType)
	b = append(b, `,"data":`...)
	if len(env.Data) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, env.Data...)
	}
	if env.TraceParent != "" {
		b = append(b, `,"traceparent":`...)
		b = appendString(b, env.TraceParent)
	}
	if env.TraceState != "" {
		b = append(b, `,"tracestate":`...)
		b = appendString(b, env.TraceState)
	}
	return append(b, '}'), nil
}
