package events

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Event types (CloudEvents "type").
const (
	TypeJobFired              = "agate.job.fired"
	TypeJobCompleted          = "agate.job.completed"
	TypeJobFailed             = "agate.job.failed"
	TypeTriggerScheduled      = "agate.trigger.scheduled"
	TypeTriggerUnscheduled    = "agate.trigger.unscheduled"
	TypeTriggerCompleted      = "agate.trigger.completed"
	TypeTriggerMisfired       = "agate.trigger.misfired"
	TypeTriggerReleased       = "agate.trigger.released"
	TypeTriggerError          = "agate.trigger.error"
	TypeClaimDropped          = "agate.claim.dropped"
	TypeTriggerRepaired       = "agate.trigger.repaired"
	TypeJobDeleted            = "agate.job.deleted"
	TypeJobAdded              = "agate.job.added"
	TypeJobInterruptRequested = "agate.job.interrupt_requested"
	TypeTriggerRescheduled    = "agate.trigger.rescheduled"
	TypeTriggerUpdated        = "agate.trigger.updated"
	TypeTriggerPaused         = "agate.trigger.paused"
	TypeTriggerResumed        = "agate.trigger.resumed"
	TypeGroupPaused           = "agate.group.paused"
	TypeGroupResumed          = "agate.group.resumed"
	TypeJobRecovered          = "agate.job.recovered"
	TypeCalendarAdded         = "agate.calendar.added"
	TypeCalendarDeleted       = "agate.calendar.deleted"
	TypeCommandAccepted       = "agate.command.accepted"
	TypeCommandRejected       = "agate.command.rejected"
)

// Reasons a TriggerReleased event gives.
const (
	ReleaseJobCompleted = "job completed" // a non-concurrent job's execution ended
	ReleaseNodeFailed   = "node failed"   // recovery released a dead node's claims
	ReleaseNodeStopping = "node stopping" // a node gave its unfired claims back as it stopped
	ReleaseFireFailed   = "fire failed"   // a fire transaction failed; its claims were given back
	ReleaseEarlierRun   = "earlier run"   // claims left by an earlier run with this instance id
)

// Reasons a ClaimDropped event gives: why a claim was not fired.
const (
	DropClaimLost      = "claim lost"      // its fired row is gone: recovery gave it back, another claim replaced it
	DropTriggerChanged = "trigger changed" // the trigger moved on or went since the claim was made
	DropTriggerError   = "trigger error"   // the trigger cannot be computed; it was put in ERROR
	DropJobBusy        = "job busy"        // a non-concurrent job already fires in this batch
)

// Aggregates an event belongs to, for history queries on the log.
const (
	AggregateJob      = "job"
	AggregateTrigger  = "trigger"
	AggregateCommand  = "command"
	AggregateCalendar = "calendar"
	AggregateGroup    = "group" // a trigger group; "*" for pause_all and resume_all
)

// Event is one entry of the log. Data is the CloudEvents data member; Topic is the NATS subject
// the relay publishes it to ("" when the event is already on the bus, e.g. a completion that a
// worker published and a scheduler recorded).
type Event struct {
	ID          uuid.UUID
	Type        string
	Source      string
	Subject     string // CloudEvents subject: "<group>.<name>"
	Time        time.Time
	Data        json.RawMessage
	Aggregate   string
	AggregateID string
	Topic       string
	TraceParent string // W3C traceparent, "" when none
	TraceState  string
}

// New builds an event with a fresh UUID v7 id and data marshalled from v (by its own AppendJSON
// when it has one); a json.RawMessage is taken as it is (its caller encoded it, often for a row
// of its own as well).
func New(typ, source, aggregate, aggregateID, topic string, now time.Time, v any) (Event, error) {
	var data json.RawMessage
	var err error
	switch v := v.(type) {
	case json.RawMessage:
		data = v
	case appender:
		data, err = v.AppendJSON(make([]byte, 0, 512))
	default:
		data, err = json.Marshal(v)
	}
	if err != nil {
		return Event{}, fmt.Errorf("encoding %s event: %w", typ, err)
	}
	return Event{
		ID: uuid.Must(uuid.NewV7()), Type: typ, Source: source, Subject: aggregateID, Time: now.UTC(),
		Data: data, Aggregate: aggregate, AggregateID: aggregateID, Topic: topic,
	}, nil
}

// JobGone is the data of a JobDeleted that no command logged: the job, and why it went (the
// end of its last execution, recovery's repairs).
type JobGone struct {
	Job    Key    `json:"job"`
	Reason string `json:"reason"`
}

// Source is the CloudEvents source of a node: agate/<ns>/<instanceId>.
func Source(namespace, instanceID string) string {
	return "agate/" + namespace + "/" + instanceID
}

// InstanceOf is the instance id of a source agate/<ns>/<instanceId> (the source itself when it
// has another form).
func InstanceOf(source string) string {
	parts := strings.SplitN(source, "/", 3)
	if len(parts) < 3 {
		return source
	}
	return parts[2]
}

// Envelope is the CloudEvents 1.0 structured-mode JSON of an event: what goes on the wire.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Type            string          `json:"type"`
	Source          string          `json:"source"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype"`
	Data            json.RawMessage `json:"data"`
	// TraceParent and TraceState are CloudEvents' distributed tracing extension: the W3C trace
	// context of the span that wrote the event. History answers and the elements of a batch
	// (BatchMessage) carry them; a message of one event has them as its headers.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// Envelope returns the wire form of e.
func (e Event) Envelope() Envelope {
	return Envelope{
		SpecVersion: "1.0", ID: e.ID.String(), Type: e.Type, Source: e.Source, Time: e.Time,
		Subject: e.Subject, DataContentType: "application/json", Data: e.Data,
	}
}

// Key names a job or a trigger: group and name.
type Key struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

// String is "<group>.<name>", the CloudEvents subject and log aggregate id.
func (k Key) String() string { return k.Group + "." + k.Name }

// JobRef names a job and its type.
type JobRef struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Type  string `json:"type"`
}

// Key returns the job's key.
func (j JobRef) Key() Key { return Key{Group: j.Group, Name: j.Name} }

// JobFired is the data of agate.job.fired: one scheduled fire of one trigger, to be run by a worker.
type JobFired struct {
	FireID           uuid.UUID       `json:"fireId"`
	Job              JobRef          `json:"job"`
	Trigger          Key             `json:"trigger"`
	Data             json.RawMessage `json:"data"`
	ScheduledTime    time.Time       `json:"scheduledTime"`
	FiredTime        time.Time       `json:"firedTime"`
	PreviousFireTime *time.Time      `json:"previousFireTime,omitempty"`
	NextFireTime     *time.Time      `json:"nextFireTime,omitempty"`
	Recovering       bool            `json:"recovering"`
	Nonconcurrent    bool            `json:"nonconcurrent"`
	// RequestsRecovery is the job's setting when the fire was claimed, as its fired row keeps
	// it (the job may change between claim and fire); nil in events logged before it existed.
	RequestsRecovery *bool  `json:"requestsRecovery,omitempty"`
	Timeout          string `json:"timeout,omitempty"`
	// PersistData says the job stores the data a completed run hands back (JobResult.Data).
	PersistData bool `json:"persistData,omitempty"`
	// TriggerState and TimesTriggered are the trigger's state and fire count after this fire
	// (WAITING, BLOCKED for a non-concurrent job, COMPLETE when it will not fire again): with
	// the fire times above, what replay writes on the trigger's row.
	TriggerState   string `json:"triggerState"`
	TimesTriggered int    `json:"timesTriggered"`
}

// TriggerScheduled is the data of agate.trigger.scheduled: the trigger's row as stored, what
// replay writes back (docs/contract.md, "The log and the tables"). Its fields are in the order of
// their JSON names, the order in which encoding/json wrote them from the map it once was.
type TriggerScheduled struct {
	Calendar  *string         `json:"calendar"`
	CommandID string          `json:"commandId"`
	Data      json.RawMessage `json:"data"`
	EndTime   *time.Time      `json:"endTime"`
	Job       JobRef          `json:"job"`
	// Kind is empty in events logged before replay existed, which lack the definition.
	Kind         string          `json:"kind"`
	Misfire      string          `json:"misfireInstruction"`
	NextFireTime *time.Time      `json:"nextFireTime"`
	Priority     int             `json:"priority"`
	Schedule     json.RawMessage `json:"schedule"`
	StartTime    time.Time       `json:"startTime"`
	State        string          `json:"state"`
	Trigger      Key             `json:"trigger"`
	Version      int64           `json:"version"`
}

// InterruptRequest is the data of agate.job.interrupt_requested: interrupt_job asks the
// workers to cancel the runs of a job, or of one fire of it.
type InterruptRequest struct {
	Job       Key       `json:"job"`
	FireID    uuid.UUID `json:"fireId,omitzero"`
	Executing int       `json:"executing"` // executions in flight the scheduler knew of
	CommandID string    `json:"commandId,omitempty"`
}

// JobResult is the data of agate.job.completed and agate.job.failed.
type JobResult struct {
	FireID        uuid.UUID `json:"fireId"`
	Job           JobRef    `json:"job"`
	Trigger       Key       `json:"trigger"`
	ScheduledTime time.Time `json:"scheduledTime"`
	Worker        string    `json:"worker"`
	StartedTime   time.Time `json:"startedTime"`
	FinishedTime  time.Time `json:"finishedTime"`
	Attempt       int       `json:"attempt"`
	// TriggerState is the trigger's state after the fire, as its JobFired said (empty when the
	// worker did not echo it). The completion step reads it only to choose how to record the
	// end: the end of a fire that left its trigger COMPLETE or BLOCKED always takes the
	// partition locks, so it is not first looked for as a repeating trigger's. A wrong value
	// costs that look, never a wrong end.
	TriggerState string    `json:"triggerState,omitempty"`
	Error        *JobError `json:"error,omitempty"`
	// Data is the job data a completed run hands back, stored on a job that persists its data.
	Data json.RawMessage `json:"data,omitempty"`
}

// JobError says why a job failed and whether it will be tried again.
type JobError struct {
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Final is true when no further attempt follows: the scheduler then releases the trigger.
	Final bool `json:"final"`
	// Interrupted is true when interrupt_job cancelled the run (it is then final).
	Interrupted bool `json:"interrupted,omitempty"`
}

// NewInstanceID is the default id of a process in the cluster (and in its events' source): the
// host name and a random suffix, so two processes on one host differ. fallback stands in for an
// unknown host name.
func NewInstanceID(fallback string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = fallback
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return host + "-" + hex.EncodeToString(b)
}

// Origin is the process that records events: it gives them their source (agate/<ns>/<id>) and
// the subject they are published on.
type Origin struct {
	Namespace  string
	InstanceID string
}

// Trigger builds an event about trigger k, published on agate.<ns>.evt.trigger.
func (o Origin) Trigger(typ string, k Key, now time.Time, data any) (Event, error) {
	return New(typ, o.Source(), AggregateTrigger, k.String(), Subjects(o.Namespace).Evt("trigger"), now, data)
}

// Job builds an event about job k, published on agate.<ns>.evt.job.
func (o Origin) Job(typ string, k Key, now time.Time, data any) (Event, error) {
	return New(typ, o.Source(), AggregateJob, k.String(), Subjects(o.Namespace).Evt("job"), now, data)
}

// Released builds a TriggerReleased event for each trigger given back, saying why; extra
// fields are added to each event's data.
func (o Origin) Released(keys []Key, reason string, now time.Time, extra map[string]any) ([]Event, error) {
	evs := make([]Event, 0, len(keys))
	for _, k := range keys {
		data := map[string]any{"trigger": k, "reason": reason}
		for f, v := range extra {
			data[f] = v
		}
		ev, err := o.Trigger(TypeTriggerReleased, k, now, data)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Source is the CloudEvents source of the origin's events.
func (o Origin) Source() string { return Source(o.Namespace, o.InstanceID) }
