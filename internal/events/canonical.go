package events

import (
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"
)

// The events a fire's hot path reads (JobFired in a worker, JobCompleted and JobFailed in the
// completion step) are first read as the canonical bytes Agate itself writes (append.go): the
// members in AppendJSON's order, no white space, strings without escapes, times in UTC. Reading
// that layout byte by byte costs a third of the json package's validating decoder
// (BenchmarkDecodeJobFired: 2.9 µs against 9.4), which was a quarter of a worker's CPU in the
// burst. Anything else (a
// member out of order, an escape, a time with an offset, a worker written in another language)
// is read by the json package, as before; so is anything the canonical reader has doubts about.
// What the canonical reader accepts it reads exactly as the json package would, which
// TestCanonicalReadsWhatTheJSONPackageReads checks on random and mutated events.

// canonical reads the canonical layout of one message body. Once a read fails, ok is false and
// every later read is a no-op returning a zero value.
type canonical struct {
	b  []byte
	i  int
	ok bool
}

// lit consumes s, which must come next.
func (c *canonical) lit(s string) {
	if !c.opt(s) {
		c.ok = false
	}
}

// opt consumes s if it comes next: an optional member's name.
func (c *canonical) opt(s string) bool {
	if c.ok && len(c.b)-c.i >= len(s) && string(c.b[c.i:c.i+len(s)]) == s {
		c.i += len(s)
		return true
	}
	return false
}

// strBytes reads a JSON string without escapes and returns its content (a slice of the body).
// JSON forbids control characters in a string; the json package refuses invalid UTF-8.
func (c *canonical) strBytes() []byte {
	if !c.ok || c.i >= len(c.b) || c.b[c.i] != '"' {
		c.ok = false
		return nil
	}
	ascii := true
	for j := c.i + 1; j < len(c.b); j++ {
		ch := c.b[j]
		if ch == '"' {
			s := c.b[c.i+1 : j]
			if ascii || utf8.Valid(s) {
				c.i = j + 1
				return s
			}
			break
		}
		if ch == '\\' || ch < 0x20 {
			break
		}
		if ch >= utf8.RuneSelf {
			ascii = false
		}
	}
	c.ok = false
	return nil
}

func (c *canonical) str() string { return string(c.strBytes()) }

// uuid reads a UUID as uuid.UUID's UnmarshalText does.
func (c *canonical) uuid() uuid.UUID {
	s := c.strBytes()
	if !c.ok {
		return uuid.Nil
	}
	u, err := uuid.ParseBytes(s)
	c.ok = err == nil
	return u
}

// time reads a UTC time in RFC 3339 as the json package does (time.Time's UnmarshalText, and
// its own checks, which a time in this form passes: a two-digit hour, a period before the
// fraction, Z for the zone).
func (c *canonical) time() time.Time {
	s := c.strBytes()
	if !c.ok || len(s) < len("2006-01-02T15:04:05Z") || s[13] != ':' || s[19] == ',' || s[len(s)-1] != 'Z' {
		c.ok = false
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalText(s); err != nil {
		c.ok = false
	}
	return t
}

func (c *canonical) boolean() bool {
	switch {
	case c.opt("true"):
		return true
	case c.opt("false"):
		return false
	}
	c.ok = false
	return false
}

// int reads an integer of at most 18 digits, which no int64 overflows.
func (c *canonical) int() int {
	if !c.ok {
		return 0
	}
	j, neg := c.i, false
	if j < len(c.b) && c.b[j] == '-' {
		neg = true
		j++
	}
	n, digits := 0, j
	for ; j < len(c.b) && '0' <= c.b[j] && c.b[j] <= '9'; j++ {
		n = n*10 + int(c.b[j]-'0')
	}
	if d := j - digits; d == 0 || d > 18 || d > 1 && c.b[digits] == '0' {
		c.ok = false
		return 0
	}
	c.i = j
	if neg {
		return -n
	}
	return n
}

// raw reads any JSON value and returns it (a slice of the body): the value ends before the
// first ',' or '}' outside a string and at the depth it started, and is checked as the json
// package checks it (jsontext.Value.IsValid: RFC 7493, the decoder's defaults).
func (c *canonical) raw() []byte {
	if !c.ok {
		return nil
	}
	start, depth := c.i, 0
	j := c.i
scan:
	for ; j < len(c.b); j++ {
		switch c.b[j] {
		case '"':
			for j++; j < len(c.b) && c.b[j] != '"'; j++ {
				if c.b[j] == '\\' {
					j++
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				break scan
			}
			depth--
		case ',':
			if depth == 0 {
				break scan
			}
		}
	}
	v := c.b[start:min(j, len(c.b))]
	if len(v) == 0 || isSpace(v[0]) || isSpace(v[len(v)-1]) || !jsontext.Value(v).IsValid() {
		c.ok = false
		return nil
	}
	c.i = j
	return v
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

func (c *canonical) jobRef() JobRef {
	var j JobRef
	c.lit(`{"group":`)
	j.Group = c.str()
	c.lit(`,"name":`)
	j.Name = c.str()
	c.lit(`,"type":`)
	j.Type = c.str()
	c.lit(`}`)
	return j
}

func (c *canonical) key() Key {
	var k Key
	c.lit(`{"group":`)
	k.Group = c.str()
	c.lit(`,"name":`)
	k.Name = c.str()
	c.lit(`}`)
	return k
}

// jobFired reads JobFired's canonical layout (JobFired.AppendJSON) over f's fields.
func (c *canonical) jobFired(f *JobFired) {
	c.lit(`{"fireId":`)
	f.FireID = c.uuid()
	c.lit(`,"job":`)
	f.Job = c.jobRef()
	c.lit(`,"trigger":`)
	f.Trigger = c.key()
	c.lit(`,"data":`)
	f.Data = append(f.Data[:0:0], c.raw()...)
	c.lit(`,"scheduledTime":`)
	f.ScheduledTime = c.time()
	c.lit(`,"firedTime":`)
	f.FiredTime = c.time()
	if c.opt(`,"previousFireTime":`) {
		t := c.time()
		f.PreviousFireTime = &t
	}
	if c.opt(`,"nextFireTime":`) {
		t := c.time()
		f.NextFireTime = &t
	}
	c.lit(`,"recovering":`)
	f.Recovering = c.boolean()
	c.lit(`,"nonconcurrent":`)
	f.Nonconcurrent = c.boolean()
	if c.opt(`,"requestsRecovery":`) {
		b := c.boolean()
		f.RequestsRecovery = &b
	}
	if c.opt(`,"timeout":`) {
		f.Timeout = c.str()
	}
	if c.opt(`,"persistData":`) {
		f.PersistData = c.boolean()
	}
	c.lit(`,"triggerState":`)
	f.TriggerState = c.str()
	c.lit(`,"timesTriggered":`)
	f.TimesTriggered = c.int()
	c.lit(`}`)
}

// jobResult reads JobResult's canonical layout (JobResult.AppendJSON) over r's fields.
func (c *canonical) jobResult(r *JobResult) {
	c.lit(`{"fireId":`)
	r.FireID = c.uuid()
	c.lit(`,"job":`)
	r.Job = c.jobRef()
	c.lit(`,"trigger":`)
	r.Trigger = c.key()
	c.lit(`,"scheduledTime":`)
	r.ScheduledTime = c.time()
	c.lit(`,"worker":`)
	r.Worker = c.str()
	c.lit(`,"startedTime":`)
	r.StartedTime = c.time()
	c.lit(`,"finishedTime":`)
	r.FinishedTime = c.time()
	c.lit(`,"attempt":`)
	r.Attempt = c.int()
	if c.opt(`,"triggerState":`) {
		r.TriggerState = c.str()
	}
	if c.opt(`,"error":`) {
		e := &JobError{}
		c.lit(`{"message":`)
		e.Message = c.str()
		c.lit(`,"retryable":`)
		e.Retryable = c.boolean()
		c.lit(`,"final":`)
		e.Final = c.boolean()
		if c.opt(`,"interrupted":`) {
			e.Interrupted = c.boolean()
		}
		c.lit(`}`)
		r.Error = e
	}
	if c.opt(`,"data":`) {
		r.Data = append(r.Data[:0:0], c.raw()...)
	}
	c.lit(`}`)
}

// decodeCanonical reads body as an envelope in the canonical layout (Envelope.AppendJSON) with
// data of a type read above, into a copy of *data that replaces it only when the whole body was
// read. ok is false, with *data untouched, for any other body or data type: the caller then
// decodes it with the json package. raw is the data's bytes, a slice of body.
func decodeCanonical(body []byte, data any) (env Envelope, raw []byte, ok bool) {
	c := canonical{b: body, ok: true}
	c.lit(`{"specversion":`)
	env.SpecVersion = c.str()
	c.lit(`,"id":`)
	env.ID = c.str()
	c.lit(`,"type":`)
	env.Type = c.str()
	c.lit(`,"source":`)
	env.Source = c.str()
	c.lit(`,"time":`)
	env.Time = c.time()
	if c.opt(`,"subject":`) {
		env.Subject = c.str()
	}
	c.lit(`,"datacontenttype":`)
	env.DataContentType = c.str()
	c.lit(`,"data":`)
	start := c.i
	var fired JobFired
	var result JobResult
	switch d := data.(type) {
	case *JobFired:
		fired = *d
		c.jobFired(&fired)
	case *JobResult:
		result = *d
		c.jobResult(&result)
	default:
		return Envelope{}, nil, false
	}
	raw = body[start:c.i]
	if c.opt(`,"traceparent":`) {
		env.TraceParent = c.str()
	}
	if c.opt(`,"tracestate":`) {
		env.TraceState = c.str()
	}
	c.lit(`}`)
	if !c.ok || c.i != len(body) {
		return Envelope{}, nil, false
	}
	switch d := data.(type) {
	case *JobFired:
		*d = fired
	case *JobResult:
		*d = result
	}
	return env, raw, true
}
