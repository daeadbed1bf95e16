package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// The events a fire makes on the hot path (JobFired, a worker's JobCompleted or JobFailed, and
// the JobDeleted of a one-shot's job) are written by hand, as the
// envelope is: encoding/json's reflection over them was a sixth of a
// scheduler's CPU and a tenth of a worker's in the burst (docs/performance-history.md). Each
// appender writes the bytes encoding/json writes for its type, which
// TestAppendersAreEncodingJSON checks, so the contract and the schemas see no difference.

// appender is a value that writes its own JSON; New uses it instead of encoding/json.
type appender interface {
	AppendJSON(b []byte) ([]byte, error)
}

// AppendJSON appends f's JSON to b.
func (f JobFired) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"fireId":`...)
	b = appendUUID(b, f.FireID)
	b = append(b, `,"job":`...)
	b = f.Job.appendJSON(b)
	b = append(b, `,"trigger":`...)
	b = f.Trigger.appendJSON(b)
	b = append(b, `,"data":`...)
	if b, err = appendRaw(b, f.Data); err != nil {
		return b, fmt.Errorf("data: %w", err)
	}
	b = append(b, `,"scheduledTime":`...)
	if b, err = appendTime(b, f.ScheduledTime); err != nil {
		return b, fmt.Errorf("scheduledTime: %w", err)
	}
	b = append(b, `,"firedTime":`...)
	if b, err = appendTime(b, f.FiredTime); err != nil {
		return b, fmt.Errorf("firedTime: %w", err)
	}
	if f.PreviousFireTime != nil {
		b = append(b, `,"previousFireTime":`...)
		if b, err = appendTime(b, *f.PreviousFireTime); err != nil {
			return b, fmt.Errorf("previousFireTime: %w", err)
		}
	}
	if f.NextFireTime != nil {
		b = append(b, `,"nextFireTime":`...)
		if b, err = appendTime(b, *f.NextFireTime); err != nil {
			return b, fmt.Errorf("nextFireTime: %w", err)
		}
	}
	b = append(b, `,"recovering":`...)
	b = strconv.AppendBool(b, f.Recovering)
	b = append(b, `,"nonconcurrent":`...)
	b = strconv.AppendBool(b, f.Nonconcurrent)
	if f.RequestsRecovery != nil {
		b = append(b, `,"requestsRecovery":`...)
		b = strconv.AppendBool(b, *f.RequestsRecovery)
	}
	if f.Timeout != "" {
		b = append(b, `,"timeout":`...)
		b = appendString(b, f.Timeout)
	}
	if f.PersistData {
		b = append(b, `,"persistData":true`...)
	}
	b = append(b, `,"triggerState":`...)
	b = appendString(b, f.TriggerState)
	b = append(b, `,"timesTriggered":`...)
	b = strconv.AppendInt(b, int64(f.TimesTriggered), 10)
	return append(b, '}'), nil
}

// AppendJSON appends r's JSON to b.
func (r JobResult) AppendJSON(b []byte) ([]byte, error) {
	var err error
	b = append(b, `{"fireId":`...)
	b = appendUUID(b, r.FireID)
	b = append(b, `,"job":`...)
	b = r.Job.appendJSON(b)
	b = append(b, `,"trigger":`...)
	b = r.Trigger.appendJSON(b)
	b = append(b, `,"scheduledTime":`...)
	if b, err = appendTime(b, r.ScheduledTime); err != nil {
		return b, fmt.Errorf("scheduledTime: %w", err)
	}
	b = append(b, `,"worker":`...)
	b = appendString(b, r.Worker)
	b = append(b, `,"startedTime":`...)
	if b, err = appendTime(b, r.StartedTime); err != nil {
		return b, fmt.Errorf("startedTime: %w", err)
	}
	b = append(b, `,"finishedTime":`...)
	if b, err = appendTime(b, r.FinishedTime); err != nil {
		return b, fmt.Errorf("finishedTime: %w", err)
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(r.Attempt), 10)
	if r.TriggerState != "" {
		b = append(b, `,"triggerState":`...)
		b = appendString(b, r.TriggerState)
	}
	if e := r.Error; e != nil {
		b = append(b, `,"error":{"message":`...)
		b = appendString(b, e.Message)
		b = append(b, `,"retryable":`...)
		b = strconv.AppendBool(b, e.Retryable)
		b = append(b, `,"final":`...)
		b = strconv.AppendBool(b, e.Final)
		if e.Interrupted {
			b = append(b, `,"interrupted":true`...)
		}
		b = append(b, '}')
	}
	if len(r.Data) > 0 {
		b = append(b, `,"data":`...)
		if b, err = appendRaw(b, r.Data); err != nil {
			return b, fmt.Errorf("data: %w", err)
		}
	}
	return append(b, '}'), nil
}

// AppendJSON appends d's JSON to b.
func (d JobGone) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"job":`...)
	b = d.Job.appendJSON(b)
	b = append(b, `,"reason":`...)
	b = appendString(b, d.Reason)
	return append(b, '}'), nil
}

func (j JobRef) appendJSON(b []byte) []byte {
	b = append(b, `{"group":`...)
	b = appendString(b, j.Group)
	b = append(b, `,"name":`...)
	b = appendString(b, j.Name)
	b = append(b, `,"type":`...)
	b = appendString(b, j.Type)
	return append(b, '}')
}

func (k Key) appendJSON(b []byte) []byte {
	b = append(b, `{"group":`...)
	b = appendString(b, k.Group)
	b = append(b, `,"name":`...)
	b = appendString(b, k.Name)
	return append(b, '}')
}

// appendUUID appends u as a JSON string in its canonical form (uuid.UUID's MarshalText).
func appendUUID(b []byte, u uuid.UUID) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	return append(b, '"')
}

// appendTime appends t as time.Time's MarshalJSON does, and fails where it fails: RFC 3339 has
// four-digit years and zone offsets under 24 hours.
func appendTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, '"')
	n := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	switch {
	case len(b) < n+5 || b[n+4] != '-':
		return b, errors.New("time " + t.String() + ": year outside of range [0,9999]")
	case b[len(b)-1] != 'Z':
		c := b[len(b)-len("Z07:00")]
		hh := 10*int(b[len(b)-5]-'0') + int(b[len(b)-4]-'0')
		if ('0' <= c && c <= '9') || hh >= 24 {
			return b, errors.New("time " + t.String() + ": timezone hour outside of range [0,23]")
		}
	}
	return append(b, '"'), nil
}

// appendRaw appends a json.RawMessage as encoding/json does: null when nil, otherwise checked,
// compacted and with HTML characters escaped. Data that needs neither (the usual case: ASCII
// JSON without spaces or HTML characters) is checked and copied.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if !json.Valid(raw) {
		return b, errors.New("not valid JSON")
	}
	if !bytes.ContainsAny(raw, " \t\r\n<>&\u2028\u2029") {
		return append(b, raw...), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return b, err
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, buf.Bytes())
	return append(b, esc.Bytes()...), nil
}

// appendString appends s as a JSON string, escaped as encoding/json escapes it (HTML characters
// and U+2028/U+2029 included; invalid UTF-8 becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
