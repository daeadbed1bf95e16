package events

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bodies reads back, in order, the events BatchMessage wrote, each with its own trace context,
// and takes a message of one event as it is.
func TestBodiesReadWhatBatchMessageWrites(t *testing.T) {
	subj := Subjects("ns").Done("noop")
	var evs []Event
	for i := range 3 {
		r := JobResult{FireID: uuid.Must(uuid.NewV7()), Job: JobRef{Group: "g", Name: "j", Type: "noop"}, Attempt: i + 1}
		ev, err := New(TypeJobCompleted, Source("ns", "w1"), AggregateJob, "g.j", subj, time.Now(), r)
		if err != nil {
			t.Fatal(err)
		}
		ev.TraceParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333" + string(rune('0'+i)) + "-01"
		if i == 1 {
			ev.TraceState = "vendor=x"
		}
		evs = append(evs, ev)
	}
	id := uuid.Must(uuid.NewV7())
	msg, err := BatchMessage(id, evs)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != subj || msg.Header.Get(jetstream.MsgIDHeader) != id.String() || msg.Header.Get("Content-Type") != ContentTypeBatch {
		t.Errorf("batch message: subject %s, headers %v", msg.Subject, msg.Header)
	}
	size := 2
	for _, e := range evs {
		size += BatchSize(e)
	}
	if len(msg.Data) > size {
		t.Errorf("BatchSize under-counts: %d bytes, %d counted", len(msg.Data), size)
	}
	bodies, err := Bodies(msg.Header, msg.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != len(evs) {
		t.Fatalf("%d bodies, want %d", len(bodies), len(evs))
	}
	for i, b := range bodies {
		var r JobResult
		env, err := DecodeRaw(b, &r)
		if err != nil {
			t.Fatal(err)
		}
		if env.ID != evs[i].ID.String() || r.Attempt != i+1 || env.TraceParent != evs[i].TraceParent || env.TraceState != evs[i].TraceState {
			t.Errorf("element %d: %+v, data %+v; want event %s with its trace context", i, env, r, evs[i].ID)
		}
	}

	single, err := Message(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	if bodies, err := Bodies(single.Header, single.Data); err != nil || len(bodies) != 1 || string(bodies[0]) != string(single.Data) {
		t.Errorf("Bodies of a single event = %d bodies, %v", len(bodies), err)
	}
}

// A batch goes to one subject, and a body that claims to be a batch must be a non-empty array.
func TestBatchesAreRefusedWhenMalformed(t *testing.T) {
	a, _ := New(TypeJobCompleted, Source("ns", "w1"), AggregateJob, "g.j", Subjects("ns").Done("a"), time.Now(), JobResult{})
	b, _ := New(TypeJobCompleted, Source("ns", "w1"), AggregateJob, "g.j", Subjects("ns").Done("b"), time.Now(), JobResult{})
	if _, err := BatchMessage(uuid.Must(uuid.NewV7()), []Event{a, b}); err == nil || !strings.Contains(err.Error(), "one subject") {
		t.Errorf("a batch across subjects: %v", err)
	}
	if _, err := BatchMessage(uuid.Must(uuid.NewV7()), nil); err == nil {
		t.Error("an empty batch was built")
	}
	h := nats.Header{"Content-Type": []string{ContentTypeBatch}}
	for _, body := range []string{`{"id":"x"}`, `[]`, `[{"id":`, ``} {
		if _, err := Bodies(h, []byte(body)); err == nil {
			t.Errorf("Bodies accepted the batch %q", body)
		}
	}
}
