package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// Event is an event of the log in its CloudEvents 1.0 form (docs/contract.md, "Events"): what
// History answers and Events reads from the streams. Data is its type's data, as sent.
// Encoded with encoding/json it is the event as it travels on NATS.
type Event struct {
	SpecVersion     string          `json:"specversion,omitempty"`
	ID              string          `json:"id"`
	Type            string          `json:"type"`
	Source          string          `json:"source"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype,omitempty"`
	Data            json.RawMessage `json:"data"`
	// TraceParent is the W3C traceparent of the span that wrote the event: History's answers
	// and Events give it (on the bus it is the message's traceparent header, or each element's
	// in a worker's batch of outcomes).
	TraceParent string `json:"traceparent,omitempty"`
}

// ErrMalformedEvent is matched (errors.Is) by the error Events yields for a message of the
// streams that is not a CloudEvents envelope; reading goes on after it.
var ErrMalformedEvent = errors.New("not a CloudEvents event")

// EventsOptions choose what Events reads. The filters combine: an event is delivered when it
// passes every one given.
type EventsOptions struct {
	// Since: the events stored since this time (JetStream's store time). Zero: every event the
	// streams hold (they keep 7 days).
	Since time.Time
	// NewOnly: none of the stored events, only those stored after Events returned; with
	// Follow, a tail from now. Since is then ignored.
	NewOnly bool
	// Follow: once the stored events are delivered, go on delivering new ones as they are
	// stored, until the context ends or Close is called.
	Follow bool
	// Job: only the events whose data names this job ("job"): the scheduling of its triggers,
	// its fires and outcomes, and the job's own events. Events about a trigger alone (paused,
	// misfired, released, …) do not name its job; filter those by Trigger.
	Job *Key
	// Trigger: only the events whose data names this trigger ("trigger", or "newTrigger" of
	// TriggerRescheduled): its scheduling and changes, and its fires and their outcomes.
	Trigger *Key
	// Types: only these types, given in full ("agate.job.fired"), without the "agate." prefix
	// ("job.fired") or by the contract's name ("JobFired"); see ParseEventType. Empty: every type.
	Types []string
}

// eventKind is where a type of event travels and what its data names, from docs/contract.md's
// table of events: Events reads only the subjects that can carry what the filters ask for.
type eventKind struct {
	family       string // "fired", "done", or the kind of an agate.<ns>.evt.<kind> subject
	job, trigger bool   // its data has "job" {group, name}, "trigger" {group, name}
}

// eventKinds lists the types this version emits: not agate.trigger.completed, which earlier
// versions logged after a trigger's last fire (its JobFired says COMPLETE), nor the reserved
// agate.job.recovered.
var eventKinds = map[string]eventKind{
	events.TypeCommandAccepted:       {family: "command"},
	events.TypeCommandRejected:       {family: "command"},
	events.TypeTriggerScheduled:      {family: "trigger", job: true, trigger: true},
	events.TypeTriggerUnscheduled:    {family: "trigger", job: true, trigger: true},
	events.TypeTriggerRescheduled:    {family: "trigger", job: true, trigger: true},
	events.TypeTriggerUpdated:        {family: "trigger", trigger: true},
	events.TypeTriggerPaused:         {family: "trigger", trigger: true},
	events.TypeTriggerResumed:        {family: "trigger", trigger: true},
	events.TypeTriggerMisfired:       {family: "trigger", trigger: true},
	events.TypeTriggerReleased:       {family: "trigger", trigger: true},
	events.TypeClaimDropped:          {family: "trigger", trigger: true},
	events.TypeTriggerError:          {family: "trigger", trigger: true},
	events.TypeTriggerRepaired:       {family: "trigger", trigger: true},
	events.TypeJobAdded:              {family: "job", job: true},
	events.TypeJobDeleted:            {family: "job", job: true},
	events.TypeJobInterruptRequested: {family: "interrupt", job: true},
	events.TypeGroupPaused:           {family: "group"},
	events.TypeGroupResumed:          {family: "group"},
	events.TypeCalendarAdded:         {family: "calendar"},
	events.TypeCalendarDeleted:       {family: "calendar"},
	events.TypeJobFired:              {family: "fired", job: true, trigger: true},
	events.TypeJobCompleted:          {family: "done", job: true, trigger: true},
	events.TypeJobFailed:             {family: "done", job: true, trigger: true},
}

// evtKinds are the kinds of agate.<ns>.evt.<kind>, all carried by the EVENTS stream.
var evtKinds = []string{"calendar", "command", "group", "interrupt", "job", "trigger"}

// EventTypes returns the event types Agate emits, sorted: the values ParseEventType accepts.
func EventTypes() []string { return slices.Sorted(maps.Keys(eventKinds)) }

// ParseEventType reads an event type given in full ("agate.job.fired"), without its "agate."
// prefix ("job.fired"), or by the contract's name ("JobFired"), and returns it in full.
func ParseEventType(s string) (string, error) {
	full := s
	if !strings.HasPrefix(full, "agate.") {
		full = "agate." + full
	}
	if _, ok := eventKinds[full]; ok {
		return full, nil
	}
	for t := range eventKinds {
		if strings.EqualFold(contractName(t), s) {
			return t, nil
		}
	}
	short := make([]string, 0, len(eventKinds))
	for _, t := range EventTypes() {
		short = append(short, strings.TrimPrefix(t, "agate."))
	}
	return "", fmt.Errorf("unknown event type %q: use one of %s (\"agate.\" may be added in front)", s, strings.Join(short, ", "))
}

// contractName is the name docs/contract.md gives a type: agate.job.interrupt_requested is
// JobInterruptRequested.
func contractName(typ string) string {
	var b strings.Builder
	for w := range strings.FieldsFuncSeq(strings.TrimPrefix(typ, "agate."), func(r rune) bool { return r == '.' || r == '_' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// readerInactivity is how long the server keeps a reader's consumer once nobody pulls from it:
// a client cannot delete it (its NATS user may not delete consumers), so it must not linger.
const readerInactivity = time.Minute

// EventStream delivers the events Events selected; see All. Close it when done.
type EventStream struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	follow  bool
	sources []*eventSource
	live    chan eventItem // every source's new events once its stored ones are delivered (Follow)
	wg      sync.WaitGroup
	ranging atomic.Bool
}

// eventSource is one ordered consumer: one stream, one filter subject.
type eventSource struct {
	stream string
	stored chan eventItem // the events stored when it was created, in stream order; closed after them
}

// eventItem is an event, or what went wrong reading one; a fatal error ends the stream.
type eventItem struct {
	ev     Event
	stored time.Time // when JetStream stored it: the order events are delivered in
	err    error
	fatal  bool
}

// before orders the heads of the sources when stored events are merged: errors first (they
// have no place in time), then by store time. Not by event time: a worker's clock and the
// scheduler's can differ by milliseconds, enough to put an outcome before its fire, while a
// fire is always stored before the worker that ran it stores the outcome.
func (a eventItem) before(b eventItem) bool {
	if a.err != nil || b.err != nil {
		return a.err != nil && b.err == nil
	}
	return a.stored.Before(b.stored)
}

// errStreamClosed is the cause of an EventStream's cancellation by Close.
var errStreamClosed = errors.New("event stream closed")

// Events reads the events of the namespace from its JetStream streams (AGATE_<ns>_EVENTS,
// _FIRED and _DONE), those opts select, with ordered consumers: ephemeral, in the server's
// memory, never acknowledged, dropped by the server a minute after the stream stops reading.
// Only the subjects that can carry what is asked for are read (trigger.* types alone read
// neither FIRED nor DONE; a job filter skips the command, group and calendar events); the job,
// trigger and type filters are then applied to each event.
//
// It returns once every reader is in place, so with Follow an event stored after it returns
// is delivered. Events come in the order JetStream stored them, across the streams: a fire
// before its outcome even when the worker's clock, which dates the outcome, is behind the
// scheduler's. Events one transaction logged for different streams (a pass's JobFired events
// and the ClaimDropped of a claim it did not fire) may come in either order. With Follow, new
// events come a quarter of a second after they are stored, held that long to be put in that
// order. An event published again after JetStream's 2-minute duplicate window comes again,
// with its id.
//
// The connection's NATS user needs the producer's rights of docs/contract.md, "NATS
// permissions", which include creating consumers on the three streams and pulling from them;
// without them Events fails after RequestTimeout with the server's permission violation. A
// namespace whose streams do not exist yet (no scheduler has started) is an error matching
// ErrUnavailable.
func (c *Client) Events(ctx context.Context, opts EventsOptions) (*EventStream, error) {
	types, subjects, err := c.eventPlan(opts)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("opening JetStream: %w", err)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	s := &EventStream{ctx: sctx, cancel: cancel, follow: opts.Follow, live: make(chan eventItem, 256)}
	match := eventMatcher(types, opts.Job, opts.Trigger)
	for _, sub := range subjects {
		if err := c.startReader(s, js, sub.stream, sub.filter, opts, match); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

type streamSubject struct{ stream, filter string }

// eventPlan returns the full types asked for (nil: any) and the stream subjects to read.
func (c *Client) eventPlan(opts EventsOptions) (map[string]bool, []streamSubject, error) {
	ns := c.opts.Namespace
	if err := events.ValidateNamespace(ns); err != nil {
		return nil, nil, err
	}
	var types map[string]bool
	candidates := EventTypes()
	if len(opts.Types) > 0 {
		types = map[string]bool{}
		candidates = nil
		for _, t := range opts.Types {
			full, err := ParseEventType(t)
			if err != nil {
				return nil, nil, err
			}
			types[full] = true
			candidates = append(candidates, full)
		}
	}
	families := map[string]bool{}
	for _, t := range candidates {
		k := eventKinds[t]
		if opts.Job != nil && !k.job || opts.Trigger != nil && !k.trigger {
			continue // its data never names one: no event of this type can pass
		}
		families[k.family] = true
	}
	s := events.Subjects(ns)
	var out []streamSubject
	var kinds []string
	for _, k := range evtKinds {
		if families[k] {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == len(evtKinds) {
		out = append(out, streamSubject{events.StreamEvents(ns), s.All("evt")})
	} else {
		for _, k := range kinds {
			out = append(out, streamSubject{events.StreamEvents(ns), s.Evt(k)})
		}
	}
	if families["fired"] {
		out = append(out, streamSubject{events.StreamFired(ns), s.All("fired")})
	}
	if families["done"] {
		out = append(out, streamSubject{events.StreamDone(ns), s.All("done")})
	}
	return types, out, nil
}

// eventMatcher is the client side of the filters: the type, and the job and trigger the data
// names (the subjects of FIRED and DONE carry the job type, not the job).
func eventMatcher(types map[string]bool, job, trigger *Key) func(Event) bool {
	return func(ev Event) bool {
		if types != nil && !types[ev.Type] {
			return false
		}
		if job == nil && trigger == nil {
			return true
		}
		var d struct {
			Job        *Key `json:"job"`
			Trigger    *Key `json:"trigger"`
			NewTrigger *Key `json:"newTrigger"`
		}
		if json.Unmarshal(ev.Data, &d) != nil {
			return false
		}
		if job != nil && (d.Job == nil || *d.Job != *job) {
			return false
		}
		return trigger == nil || d.Trigger != nil && *d.Trigger == *trigger || d.NewTrigger != nil && *d.NewTrigger == *trigger
	}
}

// startReader creates the ordered consumer of one stream subject and starts reading it.
func (c *Client) startReader(s *EventStream, js jetstream.JetStream, stream, filter string, opts EventsOptions, match func(Event) bool) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, InactiveThreshold: readerInactivity}
	switch {
	case opts.NewOnly:
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	case !opts.Since.IsZero():
		since := opts.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	if !opts.Follow {
		// A one-off read gives up on a consumer it cannot recreate; a tail keeps trying
		// (the default), so it outlives a NATS restart.
		cfg.MaxResetAttempts = 3
	}
	cctx, cancel := context.WithTimeout(s.ctx, c.opts.RequestTimeout)
	defer cancel()
	cons, err := js.OrderedConsumer(cctx, stream, cfg)
	if err != nil {
		return c.readerError(stream, err)
	}
	// The consumer counts, as it is created, the stored messages it will deliver: those are the
	// stored events, merged in store order; what comes after them is new.
	var pending uint64
	if info := cons.CachedInfo(); info != nil {
		pending = info.NumPending
	}
	src := &eventSource{stream: stream, stored: make(chan eventItem, 64)}
	s.sources = append(s.sources, src)
	if pending == 0 && !opts.Follow {
		close(src.stored)
		return nil
	}
	var mopts []jetstream.PullMessagesOpt
	if !opts.Follow && pending <= math.MaxInt {
		mopts = append(mopts, jetstream.StopAfter(int(pending))) // pull no further than the last
	}
	it, err := cons.Messages(mopts...)
	if err != nil {
		close(src.stored)
		return c.readerError(stream, err)
	}
	s.wg.Go(func() {
		defer it.Stop()
		defer context.AfterFunc(s.ctx, it.Stop)() // unblocks Next when the stream ends
		s.read(src, it, pending, match)
	})
	return nil
}

// readerError says why a stream could not be read, in terms of what to do about it.
func (c *Client) readerError(stream string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: stream %s does not exist: no scheduler of namespace %q has started yet, or the namespace is wrong",
			ErrUnavailable, stream, c.opts.Namespace)
	}
	// A denied request is never answered: the server reports the violation on the connection.
	if last := c.nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), stream) {
		return fmt.Errorf("reading stream %s: %w; the NATS user needs the producer's rights of docs/contract.md, \"NATS permissions\"", stream, last)
	}
	return fmt.Errorf("reading stream %s: %w", stream, err)
}

// read delivers one consumer's messages: the first pending ones to src.stored, the later ones
// (Follow) to the shared live channel.
func (s *EventStream) read(src *eventSource, it jetstream.MessagesContext, pending uint64, match func(Event) bool) {
	stored := pending > 0
	if !stored {
		close(src.stored)
	}
	defer func() {
		if stored {
			close(src.stored)
		}
	}()
	send := func(item eventItem) bool {
		ch := s.live
		if stored {
			ch = src.stored
		}
		select {
		case ch <- item:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for n := uint64(1); ; n++ {
		msg, err := it.Next()
		if err != nil {
			if s.ctx.Err() == nil {
				send(eventItem{err: fmt.Errorf("reading stream %s: %w", src.stream, err), fatal: true})
			}
			return
		}
		evs, err := decodeEvents(src.stream, msg)
		var at time.Time
		if meta, merr := msg.Metadata(); merr == nil {
			at = meta.Timestamp
		}
		if err != nil && !send(eventItem{err: err, stored: at}) {
			return
		}
		for _, ev := range evs {
			if match(ev) && !send(eventItem{ev: ev, stored: at}) {
				return
			}
		}
		if stored && n == pending {
			close(src.stored)
			stored = false
			if !s.follow {
				return
			}
		}
	}
}

// decodeEvents reads the events of a message: one, or each of a batch (a worker's outcomes, a
// transaction's events of the EVENTS stream).
// It returns those it could read, and an error for the others.
func decodeEvents(stream string, msg jetstream.Msg) ([]Event, error) {
	malformed := func(err error) error {
		var seq uint64
		if meta, merr := msg.Metadata(); merr == nil {
			seq = meta.Sequence.Stream
		}
		return fmt.Errorf("%w: message %d of stream %s (subject %s): %v", ErrMalformedEvent, seq, stream, msg.Subject(), err)
	}
	bodies, err := events.Bodies(msg.Headers(), msg.Data())
	if err != nil {
		return nil, malformed(err)
	}
	evs := make([]Event, 0, len(bodies))
	var errs []error
	for i, b := range bodies {
		var ev Event
		err := json.Unmarshal(b, &ev)
		if err == nil && (ev.SpecVersion == "" || ev.ID == "" || ev.Type == "") {
			err = errors.New("specversion, id or type is missing")
		}
		switch {
		case err != nil && len(bodies) > 1:
			errs = append(errs, fmt.Errorf("event %d of %d: %w", i+1, len(bodies), err))
		case err != nil:
			errs = append(errs, err)
		default:
			ev.TraceParent = cmp.Or(ev.TraceParent, msg.Headers().Get("traceparent"))
			evs = append(evs, ev)
		}
	}
	if len(errs) > 0 {
		return evs, malformed(errors.Join(errs...))
	}
	return evs, nil
}

// All yields the events, or an error: one matching ErrMalformedEvent for a message that is no
// event (reading goes on if the loop does), or one that ends the iteration. Without Follow,
// it ends after the last stored event; with Follow, when the context passed to Events ends
// (yielding its error, context.Canceled for instance) or Close is called (without error).
// A stream has one iteration: call All once.
func (s *EventStream) All() iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if !s.ranging.CompareAndSwap(false, true) {
			yield(Event{}, errors.New("EventStream.All called twice: a stream is read once"))
			return
		}
		if s.merge(yield) && s.follow {
			s.tail(yield)
		}
	}
}

// liveReorder is how long a new event is held before it is delivered, so that events of
// different streams stored about the same time come in the order they were stored (a fire
// before the outcome of a fast job, which another reader may hand over first).
const liveReorder = 250 * time.Millisecond

// tail yields the new events, each liveReorder after it arrived, in store order among those held.
func (s *EventStream) tail(yield func(Event, error) bool) {
	type held struct {
		item eventItem
		at   time.Time // when it arrived
	}
	var buf []held // by store time; equal times in arrival order
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	flush := func(n int) bool {
		for _, h := range buf[:n] {
			if !yield(h.item.ev, nil) {
				return false
			}
		}
		buf = slices.Delete(buf, 0, n)
		return true
	}
	for {
		if len(buf) > 0 {
			first := slices.MinFunc(buf, func(a, b held) int { return a.at.Compare(b.at) })
			timer.Reset(time.Until(first.at.Add(liveReorder)))
		}
		select {
		case item := <-s.live:
			switch {
			case item.fatal:
				if flush(len(buf)) {
					yield(item.ev, item.err)
				}
				return
			case item.err != nil: // no time to order it by: at once
				if !yield(item.ev, item.err) {
					return
				}
			default:
				i, _ := slices.BinarySearchFunc(buf, item.stored, func(h held, t time.Time) int {
					if h.item.stored.After(t) {
						return 1
					}
					return -1 // equal times: after those already held
				})
				buf = slices.Insert(buf, i, held{item, time.Now()})
			}
		case now := <-timer.C:
			// Deliver every event held long enough, and those stored earlier that came later.
			n := 0
			for i, h := range buf {
				if !h.at.Add(liveReorder).After(now) {
					n = i + 1
				}
			}
			if !flush(n) {
				return
			}
		case <-s.ctx.Done():
			s.ended(yield)
			return
		}
	}
}

// merge yields the stored events of every source in store order, and reports whether to go on.
func (s *EventStream) merge(yield func(Event, error) bool) bool {
	type head struct {
		src  int
		item eventItem
	}
	recv := func(i int) (eventItem, bool) {
		select {
		case item, ok := <-s.sources[i].stored:
			return item, ok
		case <-s.ctx.Done():
			return eventItem{}, false
		}
	}
	var heads []head
	for i := range s.sources {
		if item, ok := recv(i); ok {
			heads = append(heads, head{i, item})
		}
	}
	for len(heads) > 0 && s.ctx.Err() == nil {
		j := 0
		for k := 1; k < len(heads); k++ {
			if heads[k].item.before(heads[j].item) {
				j = k
			}
		}
		h := heads[j]
		if !yield(h.item.ev, h.item.err) || h.item.fatal {
			return false
		}
		if item, ok := recv(h.src); ok {
			heads[j].item = item
		} else {
			heads = slices.Delete(heads, j, j+1)
		}
	}
	if s.ctx.Err() != nil {
		s.ended(yield)
		return false
	}
	return true
}

// ended yields why the stream's context ended, unless Close ended it.
func (s *EventStream) ended(yield func(Event, error) bool) {
	if cause := context.Cause(s.ctx); !errors.Is(cause, errStreamClosed) {
		yield(Event{}, cause)
	}
}

// Close stops reading and waits for the readers to stop. It may be called more than once, and
// from another goroutine than the one ranging over All.
func (s *EventStream) Close() {
	s.cancel(errStreamClosed)
	s.wg.Wait()
}
