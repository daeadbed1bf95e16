package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/devenv/testnode"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/schemas"
)

// Events against a real node and worker: new events as they happen, filtered by job and by
// trigger; then the stored ones, merged across the three streams in store order, each valid
// against its contract schema, and filtered by type, job, trigger and time.
func TestEvents(t *testing.T) {
	n := testnode.Start(t, "clientevents", nil)
	n.StartWorker(t)
	c := client.New(n.NC, client.Options{Namespace: n.Namespace})
	// A follow that waits in vain ends with the context's error instead of hanging the package.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	jobA, jobB := client.Key{Group: "tail", Name: "a"}, client.Key{Group: "tail", Name: "b"}
	trigB := client.Key{Group: "tail", Name: "b-once"}

	liveA, err := c.Events(ctx, client.EventsOptions{Follow: true, NewOnly: true, Job: &jobA})
	if err != nil {
		t.Fatal(err)
	}
	defer liveA.Close()
	liveB, err := c.Events(ctx, client.EventsOptions{Follow: true, NewOnly: true, Trigger: &trigB})
	if err != nil {
		t.Fatal(err)
	}
	defer liveB.Close()
	for _, k := range []client.Key{jobA, jobB} { // durable: a trigger is added to tail.a after its one-shot
		if _, err := c.ScheduleJob(ctx, client.ScheduleJob{Job: client.Job{Group: k.Group, Name: k.Name, Type: "noop", Durable: true},
			Triggers: []client.Trigger{client.OneShot(k.Group, k.Name+"-once", time.Now())}}); err != nil {
			t.Fatal(err)
		}
	}
	nextA, stopA := iter.Pull2(liveA.All())
	defer stopA()
	want := []string{"agate.job.added tail.a", "agate.trigger.scheduled tail.a-once", "agate.job.fired tail.a", "agate.job.completed tail.a"}
	if got := take(t, nextA, len(want)); !slices.Equal(got, want) {
		t.Fatalf("following job tail.a: %q; want %q", got, want)
	}
	// A trigger added to the job afterwards: a stored event of EVENTS later than the stored
	// completion of DONE, which the merge must put after it.
	if _, err := c.ScheduleTrigger(ctx, jobA, client.Cron("tail", "a-later", "0 0 2 * * ?", "")); err != nil {
		t.Fatal(err)
	}
	if got := take(t, nextA, 1); got[0] != "agate.trigger.scheduled tail.a-later" {
		t.Fatalf("following job tail.a after schedule_trigger: %q", got)
	}
	nextB, stopB := iter.Pull2(liveB.All())
	defer stopB()
	// The one-shot's fire deletes it, its JobFired saying so; the worker's JobCompleted follows.
	got := take(t, nextB, 3)
	want = []string{"agate.trigger.scheduled tail.b-once", "agate.job.fired tail.b", "agate.job.completed tail.b"}
	if !slices.Equal(got, want) {
		t.Fatalf("following trigger tail.b-once: %q; want %q", got, want)
	}

	all := stored(t, c, client.EventsOptions{})
	pos := func(line string) int {
		i := slices.Index(all, line)
		if i < 0 {
			t.Fatalf("the stored events lack %q:\n%s", line, strings.Join(all, "\n"))
		}
		return i
	}
	order := []string{"agate.trigger.scheduled tail.a-once", "agate.job.fired tail.a", "agate.job.completed tail.a", "agate.trigger.scheduled tail.a-later"}
	for i := 1; i < len(order); i++ {
		if pos(order[i-1]) > pos(order[i]) {
			t.Errorf("stored events out of time order: %q comes after %q:\n%s", order[i-1], order[i], strings.Join(all, "\n"))
		}
	}
	if !slices.ContainsFunc(all, func(l string) bool { return strings.HasPrefix(l, "agate.command.accepted ") }) {
		t.Errorf("the stored events lack the commands' outcomes:\n%s", strings.Join(all, "\n"))
	}

	for _, tc := range []struct {
		name string
		opts client.EventsOptions
		want []string
	}{
		{"by type", client.EventsOptions{Types: []string{"job.fired", "JobCompleted"}},
			[]string{"agate.job.fired tail.a", "agate.job.completed tail.a", "agate.job.fired tail.b", "agate.job.completed tail.b"}},
		{"by trigger", client.EventsOptions{Trigger: &trigB},
			[]string{"agate.trigger.scheduled tail.b-once", "agate.job.fired tail.b", "agate.job.completed tail.b"}},
		{"by job and type", client.EventsOptions{Job: &jobA, Types: []string{"agate.trigger.scheduled"}},
			[]string{"agate.trigger.scheduled tail.a-once", "agate.trigger.scheduled tail.a-later"}},
		{"a type that never names a job", client.EventsOptions{Job: &jobA, Types: []string{"command.accepted"}}, nil},
		{"since later", client.EventsOptions{Since: time.Now().Add(time.Hour)}, nil},
	} {
		got := stored(t, c, tc.opts)
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q; want %q", tc.name, got, tc.want)
		}
	}
}

// take reads n events from next, as "type subject".
func take(t *testing.T, next func() (client.Event, error, bool), n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		ev, err, ok := next()
		if !ok {
			t.Fatalf("the stream ended after %q", got)
		}
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, ev.Type+" "+ev.Subject)
	}
	return got
}

// stored reads the stored events opts select, as "type subject", and checks that each encodes
// to its schema.
func stored(t *testing.T, c *client.Client, opts client.EventsOptions) []string {
	t.Helper()
	s, err := c.Events(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for ev, err := range s.All() {
		if err != nil {
			t.Fatalf("reading %+v: %v", opts, err)
		}
		validate(t, ev)
		got = append(got, ev.Type+" "+ev.Subject)
	}
	return got
}

// eventSchemas compiles the contract's event schemas (schemas/json/event), once.
var eventSchemas = sync.OnceValues(func() (*jsonschema.Compiler, error) {
	sc := jsonschema.NewCompiler()
	files, err := fs.Glob(schemas.JSON, "json/event/*.json")
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no event schemas: %v", err)
	}
	for _, f := range files {
		raw, _ := fs.ReadFile(schemas.JSON, f)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if err := sc.AddResource("https://agate.dev/schemas/event/"+strings.TrimPrefix(f, "json/event/"), doc); err != nil {
			return nil, err
		}
	}
	return sc, nil
})

// validate checks that ev encodes to the CloudEvents JSON its contract schema describes
// (schemas/json/event/<Name>.json), specversion 1.0 included.
func validate(t *testing.T, ev client.Event) {
	t.Helper()
	sc, err := eventSchemas()
	if err != nil {
		t.Fatal(err)
	}
	name := ""
	for _, w := range strings.FieldsFunc(strings.TrimPrefix(ev.Type, "agate."), func(r rune) bool { return r == '.' || r == '_' }) {
		name += strings.ToUpper(w[:1]) + w[1:]
	}
	sch, err := sc.Compile("https://agate.dev/schemas/event/" + name + ".json")
	if err != nil {
		t.Fatalf("no schema for %s: %v", ev.Type, err)
	}
	data, _ := json.Marshal(ev)
	inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err := sch.Validate(inst); err != nil {
		t.Errorf("event %s does not match its schema: %v", data, err)
	}
}

// A follow ends with the context's error when it is cancelled, and quietly when closed; a
// namespace without streams is unavailable; event types are read in three spellings.
func TestEventsEnds(t *testing.T) {
	n := testnode.Start(t, "clienteventsend", nil)
	c := client.New(n.NC, client.Options{Namespace: n.Namespace})
	ctx, cancel := context.WithCancel(t.Context())
	s, err := c.Events(ctx, client.EventsOptions{Follow: true, NewOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	var errs []error
	for _, err := range s.All() {
		errs = append(errs, err)
	}
	if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("a cancelled follow yielded %v; want context.Canceled once", errs)
	}
	s.Close()

	s, err = c.Events(t.Context(), client.EventsOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	for _, err := range s.All() {
		t.Errorf("a closed follow yielded %v", err)
	}

	other := client.New(n.NC, client.Options{Namespace: "clienteventsnone"})
	if _, err := other.Events(t.Context(), client.EventsOptions{}); !errors.Is(err, client.ErrUnavailable) ||
		!strings.Contains(err.Error(), "AGATE_clienteventsnone_EVENTS does not exist") {
		t.Errorf("a namespace without streams: %v; want unavailable, naming the stream", err)
	}

	for _, in := range []string{"agate.job.fired", "job.fired", "JobFired", "jobfired"} {
		if got, err := client.ParseEventType(in); err != nil || got != "agate.job.fired" {
			t.Errorf("ParseEventType(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := client.ParseEventType("job.exploded"); err == nil || !strings.Contains(err.Error(), "trigger.scheduled") {
		t.Errorf("ParseEventType(job.exploded): %v; want an error listing the types", err)
	}
}

// Outcomes a worker published as one batch are read as events of their own, each with its
// trace context; an element that is no event is reported as malformed, the others read.
func TestEventsReadsABatchOfOutcomes(t *testing.T) {
	n := testnode.Start(t, "clienteventsbatch", nil)
	c := client.New(n.NC, client.Options{Namespace: n.Namespace})
	subj := events.Subjects(n.Namespace).Done("noop")
	var evs []events.Event
	for i := range 2 {
		res := events.JobResult{FireID: uuid.Must(uuid.NewV7()), Job: events.JobRef{Group: "batch", Name: fmt.Sprint("j", i), Type: "noop"},
			Trigger: events.Key{Group: "batch", Name: fmt.Sprint("t", i)}, Attempt: 1}
		ev, err := events.New(events.TypeJobCompleted, events.Source(n.Namespace, "w1"), events.AggregateJob, res.Job.Key().String(), subj, time.Now(), res)
		if err != nil {
			t.Fatal(err)
		}
		ev.TraceParent = fmt.Sprintf("00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333%d-01", i)
		evs = append(evs, ev)
	}
	msg, err := events.BatchMessage(uuid.Must(uuid.NewV7()), evs)
	if err != nil {
		t.Fatal(err)
	}
	// A third element that is no event, as a faulty publisher might add.
	msg.Data = append(msg.Data[:len(msg.Data)-1], `,{"id":"x"}]`...)
	if _, err := n.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	s, err := c.Events(t.Context(), client.EventsOptions{Types: []string{"JobCompleted"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []client.Event
	var malformed int
	for ev, err := range s.All() {
		switch {
		case errors.Is(err, client.ErrMalformedEvent):
			malformed++
		case err != nil:
			t.Fatal(err)
		default:
			validate(t, ev)
			got = append(got, ev)
		}
	}
	if malformed != 1 || len(got) != len(evs) {
		t.Fatalf("read %d events and %d malformed; want %d and 1", len(got), malformed, len(evs))
	}
	for i, ev := range got {
		if ev.ID != evs[i].ID.String() || ev.TraceParent != evs[i].TraceParent {
			t.Errorf("event %d: %s with traceparent %q; want %s with %q", i, ev.ID, ev.TraceParent, evs[i].ID, evs[i].TraceParent)
		}
	}
}
