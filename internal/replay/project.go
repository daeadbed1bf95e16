package replay

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// Job is a job_details row.
type Job struct {
	Key              events.Key
	Type             string
	Description      string
	Durable          bool
	Nonconcurrent    bool
	RequestsRecovery bool
	TimeoutMs        *int64
	Data             json.RawMessage
	Version          int64
	PersistData      bool
}

// Trigger is a triggers row.
type Trigger struct {
	Key          events.Key
	Job          events.Key
	Kind         string
	Schedule     json.RawMessage
	Start        time.Time
	End          *time.Time
	Calendar     *string
	Priority     int
	Misfire      string
	Next, Prev   *time.Time
	Times        int
	State        string
	Partition    int
	TraceContext *string
	Data         json.RawMessage
	Version      int64
}

// Fired is a fired_triggers row of an execution in flight (EXECUTING).
type Fired struct {
	ID               uuid.UUID
	Trigger, Job     events.Key
	Instance         string
	FiredTime        time.Time
	SchedTime        time.Time
	Nonconcurrent    bool
	RequestsRecovery bool
	Priority         int
	Recovering       bool
}

// Calendar is a calendars row.
type Calendar struct {
	Name     string
	Calendar json.RawMessage
	Version  int64
}

// State is what a namespace's log says its tables hold. Claims made ahead of time are not
// logged (a claim is undone or becomes a fire within seconds, and logging it would cost a row
// per fire): the projection has no ACQUIRED trigger and no ACQUIRED fired row, and the diff
// reads a live ACQUIRED trigger as WAITING and leaves ACQUIRED fired rows out.
type State struct {
	Jobs         map[events.Key]*Job
	Triggers     map[events.Key]*Trigger
	Fired        map[uuid.UUID]*Fired
	Calendars    map[string]*Calendar
	PausedGroups map[string]bool
	// byJob indexes Triggers by job: deleting a job and blocking its other triggers must not
	// scan every trigger (a burst's log has as many jobs as triggers).
	byJob map[events.Key]map[events.Key]*Trigger
}

// NewState is an empty projection.
func NewState() *State {
	return &State{Jobs: map[events.Key]*Job{}, Triggers: map[events.Key]*Trigger{}, Fired: map[uuid.UUID]*Fired{},
		Calendars: map[string]*Calendar{}, PausedGroups: map[string]bool{}, byJob: map[events.Key]map[events.Key]*Trigger{}}
}

// putTrigger stores a trigger, replacing the one of its key.
func (s *State) putTrigger(t *Trigger) {
	s.deleteTrigger(t.Key)
	s.Triggers[t.Key] = t
	m := s.byJob[t.Job]
	if m == nil {
		m = map[events.Key]*Trigger{}
		s.byJob[t.Job] = m
	}
	m[t.Key] = t
}

func (s *State) deleteTrigger(k events.Key) {
	t := s.Triggers[k]
	if t == nil {
		return
	}
	delete(s.Triggers, k)
	if m := s.byJob[t.Job]; m != nil {
		delete(m, k)
		if len(m) == 0 {
			delete(s.byJob, t.Job)
		}
	}
}

// Record is one row of the events table, as replay reads it.
type Record struct {
	Seq          int64
	Type         string
	Source       string // agate/<ns>/<instance>
	Data         []byte
	TraceContext string
}

// Apply changes the state as the event says. An event that changes nothing the tables hold
// (a command's outcome, a dropped claim, a claim given back) is skipped.
func (s *State) Apply(r Record) error {
	apply, ok := appliers[r.Type]
	if !ok {
		return nil
	}
	if err := apply(s, r); err != nil {
		return fmt.Errorf("event %d (%s): %w", r.Seq, r.Type, err)
	}
	return nil
}

var appliers = map[string]func(*State, Record) error{
	events.TypeJobAdded:           (*State).jobAdded,
	events.TypeJobDeleted:         (*State).jobDeleted,
	events.TypeTriggerScheduled:   (*State).triggerScheduled,
	events.TypeTriggerUnscheduled: (*State).triggerDeleted,
	events.TypeTriggerCompleted:   (*State).triggerDeleted, // a last fire's, in logs written before its JobFired said it alone
	events.TypeTriggerRescheduled: (*State).triggerRescheduled,
	events.TypeTriggerPaused:      (*State).triggerPaused,
	events.TypeTriggerResumed:     (*State).triggerResumed,
	events.TypeTriggerUpdated:     (*State).triggerUpdated,
	events.TypeTriggerMisfired:    (*State).triggerMisfired,
	events.TypeTriggerError:       (*State).triggerError,
	events.TypeTriggerReleased:    (*State).triggerReleased,
	events.TypeTriggerRepaired:    (*State).triggerRepaired,
	events.TypeGroupPaused:        (*State).groupPaused,
	events.TypeGroupResumed:       (*State).groupResumed,
	events.TypeCalendarAdded:      (*State).calendarAdded,
	events.TypeCalendarDeleted:    (*State).calendarDeleted,
	events.TypeJobFired:           (*State).jobFired,
	events.TypeJobCompleted:       (*State).jobEnded,
	events.TypeJobFailed:          (*State).jobEnded,
}

func decode(r Record, v any) error {
	if err := json.Unmarshal(r.Data, v); err != nil {
		return fmt.Errorf("reading its data: %w", err)
	}
	return nil
}

// trigger returns the trigger an event names; a missing one is an error: the log says it
// changed a row that, by the log, does not exist.
func (s *State) trigger(k events.Key) (*Trigger, error) {
	t := s.Triggers[k]
	if t == nil {
		return nil, fmt.Errorf("trigger %s does not exist at this point of the log", k)
	}
	return t, nil
}

type jobSpec struct {
	Group            string          `json:"group"`
	Name             string          `json:"name"`
	Type             string          `json:"type"`
	Data             json.RawMessage `json:"data"`
	Nonconcurrent    bool            `json:"nonconcurrent"`
	RequestsRecovery bool            `json:"requestsRecovery"`
	Durable          bool            `json:"durable"`
	Timeout          string          `json:"timeout"`
	Description      string          `json:"description"`
	PersistData      bool            `json:"persistData"`
}

func (s *State) jobAdded(r Record) error {
	var d struct {
		Job jobSpec `json:"job"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	k := events.Key{Group: d.Job.Group, Name: d.Job.Name}
	j := &Job{Key: k, Type: d.Job.Type, Description: d.Job.Description, Durable: d.Job.Durable,
		Nonconcurrent: d.Job.Nonconcurrent, RequestsRecovery: d.Job.RequestsRecovery, Data: d.Job.Data,
		PersistData: d.Job.PersistData, Version: 1}
	if len(j.Data) == 0 {
		j.Data = json.RawMessage("{}")
	}
	if d.Job.Timeout != "" {
		t, err := trigger.ParseDuration(d.Job.Timeout)
		if err != nil {
			return fmt.Errorf("job %s: timeout: %w", k, err)
		}
		ms := t.Milliseconds()
		j.TimeoutMs = &ms
	}
	if old := s.Jobs[k]; old != nil {
		j.Version = old.Version + 1
	}
	s.Jobs[k] = j
	return nil
}

// jobDeleted deletes a job and its triggers (delete_job; the other deletions leave none).
func (s *State) jobDeleted(r Record) error {
	var d struct {
		Job events.Key `json:"job"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	delete(s.Jobs, d.Job)
	for k := range s.byJob[d.Job] {
		s.deleteTrigger(k)
	}
	return nil
}

func (s *State) triggerScheduled(r Record) error {
	var d events.TriggerScheduled
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.Kind == "" {
		return fmt.Errorf("trigger %s: the event lacks the trigger's definition (logged before replay existed)", d.Trigger)
	}
	t := &Trigger{Key: d.Trigger, Job: d.Job.Key(), Kind: d.Kind, Schedule: d.Schedule, Start: d.StartTime, End: d.EndTime,
		Calendar: d.Calendar, Priority: d.Priority, Misfire: d.Misfire, Next: d.NextFireTime, State: d.State,
		Partition: store.SlotOf(d.Job.Group, d.Job.Name), Data: d.Data, Version: d.Version}
	if r.TraceContext != "" {
		tc := r.TraceContext
		t.TraceContext = &tc
	}
	if len(t.Data) == 0 || string(t.Data) == "null" {
		t.Data = json.RawMessage("{}")
	}
	// A trigger added while pause_all holds records its group as paused (Quartz's storeTrigger).
	if s.PausedGroups[store.AllGroupsPaused] {
		s.PausedGroups[d.Trigger.Group] = true
	}
	s.putTrigger(t)
	return nil
}

func (s *State) triggerDeleted(r Record) error {
	var d struct {
		Trigger events.Key `json:"trigger"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	s.deleteTrigger(d.Trigger)
	return nil
}

// triggerRescheduled follows the new trigger's TriggerScheduled: the old one goes, unless the
// new one took its key.
func (s *State) triggerRescheduled(r Record) error {
	var d struct {
		Trigger    events.Key `json:"trigger"`
		NewTrigger events.Key `json:"newTrigger"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.NewTrigger != d.Trigger {
		s.deleteTrigger(d.Trigger)
	}
	return nil
}

// stateChange is the data of the events that change one trigger's state.
type stateChange struct {
	Trigger  events.Key `json:"trigger"`
	State    string     `json:"state"`
	Misfired bool       `json:"misfired"` // TriggerResumed
	Reason   string     `json:"reason"`   // TriggerReleased
	To       string     `json:"to"`       // TriggerRepaired
}

// changeTrigger applies f to the trigger a state-changing event names.
func (s *State) changeTrigger(r Record, f func(*Trigger, stateChange)) error {
	var d stateChange
	if err := decode(r, &d); err != nil {
		return err
	}
	t, err := s.trigger(d.Trigger)
	if err != nil {
		return err
	}
	f(t, d)
	return nil
}

func (s *State) triggerPaused(r Record) error {
	return s.changeTrigger(r, func(t *Trigger, d stateChange) { t.State, t.Version = d.State, t.Version+1 })
}

// triggerResumed sets the state a resume gave; one that misfired while paused got its new
// times and version from its TriggerMisfired.
func (s *State) triggerResumed(r Record) error {
	return s.changeTrigger(r, func(t *Trigger, d stateChange) {
		t.State = d.State
		if !d.Misfired {
			t.Version++
		}
	})
}

// triggerUpdated is a new next fire time after a calendar was replaced: none left is COMPLETE.
func (s *State) triggerUpdated(r Record) error {
	var d struct {
		Trigger events.Key `json:"trigger"`
		Next    *time.Time `json:"nextFireTime"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	t, err := s.trigger(d.Trigger)
	if err != nil {
		return err
	}
	t.Next, t.Version = d.Next, t.Version+1
	if d.Next == nil {
		t.State = store.StateComplete
	}
	return nil
}

func (s *State) triggerMisfired(r Record) error {
	var d struct {
		Trigger  events.Key      `json:"trigger"`
		Next     *time.Time      `json:"nextFireTime"`
		Prev     *time.Time      `json:"previousFireTime"`
		Times    int             `json:"timesTriggered"`
		Schedule json.RawMessage `json:"schedule"`
		State    string          `json:"state"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.State == "" {
		return fmt.Errorf("trigger %s: the event lacks the trigger's new state (logged before replay existed)", d.Trigger)
	}
	t, err := s.trigger(d.Trigger)
	if err != nil {
		return err
	}
	t.Next, t.Prev, t.Times, t.Schedule, t.State, t.Version = d.Next, d.Prev, d.Times, d.Schedule, d.State, t.Version+1
	return nil
}

func (s *State) triggerError(r Record) error {
	return s.changeTrigger(r, func(t *Trigger, _ stateChange) { t.State = store.StateError })
}

// triggerReleased: an execution of its non-concurrent job ended (BLOCKED → WAITING,
// PAUSED_BLOCKED → PAUSED). The other reasons give back claims made ahead, which the
// projection never held (ACQUIRED reads as WAITING).
func (s *State) triggerReleased(r Record) error {
	return s.changeTrigger(r, func(t *Trigger, d stateChange) {
		if d.Reason == events.ReleaseJobCompleted {
			t.State = unblocked(t.State)
		}
	})
}

func unblocked(state string) string {
	switch state {
	case store.StatePausedBlocked:
		return store.StatePaused
	case store.StateBlocked:
		return store.StateWaiting
	}
	return state
}

// triggerRepaired: the healing scan moved a stuck trigger to another state, or deleted it (to "").
func (s *State) triggerRepaired(r Record) error {
	var d stateChange
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.To == "" {
		s.deleteTrigger(d.Trigger)
		return nil
	}
	return s.changeTrigger(r, func(t *Trigger, d stateChange) { t.State = d.To })
}

type groupChange struct {
	Group string `json:"group"`
	All   bool   `json:"all"`
}

func (g groupChange) has(group string) bool { return g.All || g.Group == group }

// groupPaused records the group as paused (pause_all: the marker and every group that has
// triggers) and pauses its triggers: WAITING → PAUSED, BLOCKED → PAUSED_BLOCKED.
func (s *State) groupPaused(r Record) error {
	var d groupChange
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.All {
		s.PausedGroups[store.AllGroupsPaused] = true
		for _, t := range s.Triggers {
			s.PausedGroups[t.Key.Group] = true
		}
	} else {
		s.PausedGroups[d.Group] = true
	}
	for _, t := range s.Triggers {
		if !d.has(t.Key.Group) {
			continue
		}
		switch t.State {
		case store.StateWaiting:
			t.State, t.Version = store.StatePaused, t.Version+1
		case store.StateBlocked:
			t.State, t.Version = store.StatePausedBlocked, t.Version+1
		}
	}
	return nil
}

// groupResumed comes after the TriggerResumed of each trigger it resumed: the group is no
// longer paused (resume_all: the marker and every group that has triggers).
func (s *State) groupResumed(r Record) error {
	var d groupChange
	if err := decode(r, &d); err != nil {
		return err
	}
	if !d.All {
		delete(s.PausedGroups, d.Group)
		return nil
	}
	delete(s.PausedGroups, store.AllGroupsPaused)
	for _, t := range s.Triggers {
		delete(s.PausedGroups, t.Key.Group)
	}
	return nil
}

func (s *State) calendarAdded(r Record) error {
	var d struct {
		Name     string          `json:"name"`
		Calendar json.RawMessage `json:"calendar"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	c := &Calendar{Name: d.Name, Calendar: d.Calendar, Version: 1}
	if old := s.Calendars[d.Name]; old != nil {
		c.Version = old.Version + 1
	}
	s.Calendars[d.Name] = c
	return nil
}

func (s *State) calendarDeleted(r Record) error {
	var d struct {
		Name string `json:"name"`
	}
	if err := decode(r, &d); err != nil {
		return err
	}
	delete(s.Calendars, d.Name)
	return nil
}

// jobFired advances the trigger, or deletes it after its last fire (COMPLETE), and records the
// execution in flight; a non-concurrent job's other triggers wait for it. A recovering JobFired
// fires an execution again: only its fired row changes.
func (s *State) jobFired(r Record) error {
	var d events.JobFired
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.Recovering {
		f := s.Fired[d.FireID]
		if f == nil {
			return fmt.Errorf("fire %s was fired again but is not in flight at this point of the log", d.FireID)
		}
		f.Recovering, f.FiredTime = true, d.FiredTime
		return nil
	}
	if d.TriggerState == "" {
		return fmt.Errorf("fire %s: the event lacks the trigger's new state (logged before replay existed)", d.FireID)
	}
	t, err := s.trigger(d.Trigger)
	if err != nil {
		return err
	}
	sched := d.ScheduledTime
	t.Next, t.Prev, t.Times, t.State = d.NextFireTime, &sched, d.TimesTriggered, d.TriggerState
	f := &Fired{ID: d.FireID, Trigger: d.Trigger, Job: d.Job.Key(), Instance: events.InstanceOf(r.Source),
		FiredTime: d.FiredTime, SchedTime: d.ScheduledTime, Nonconcurrent: d.Nonconcurrent, Priority: t.Priority}
	if d.RequestsRecovery != nil {
		f.RequestsRecovery = *d.RequestsRecovery // as claimed: the job may have changed since
	} else if j := s.Jobs[d.Job.Key()]; j != nil {
		f.RequestsRecovery = j.RequestsRecovery // logged before JobFired said
	}
	s.Fired[d.FireID] = f
	if d.Nonconcurrent {
		for _, o := range s.byJob[d.Job.Key()] {
			if o.Key == d.Trigger {
				continue
			}
			switch o.State {
			case store.StateWaiting:
				o.State = store.StateBlocked
			case store.StatePaused:
				o.State = store.StatePausedBlocked
			}
		}
	}
	if d.TriggerState == store.StateComplete {
		// The fire deleted the trigger, its last. A log written before the fire said so alone
		// has a TriggerCompleted after this event, which finds the trigger gone.
		s.deleteTrigger(d.Trigger)
	}
	return nil
}

// jobEnded is a completion or a final failure: the execution's fired row goes, and a completed
// run of a job that persists its data stores the data it handed back. The log holds only the
// outcomes that ended an execution in flight.
func (s *State) jobEnded(r Record) error {
	var d events.JobResult
	if err := decode(r, &d); err != nil {
		return err
	}
	if d.Error != nil && !d.Error.Final {
		return nil // another attempt follows
	}
	if _, ok := s.Fired[d.FireID]; !ok {
		return nil
	}
	delete(s.Fired, d.FireID)
	if r.Type != events.TypeJobCompleted || len(d.Data) == 0 {
		return nil
	}
	j := s.Jobs[d.Job.Key()]
	var obj map[string]json.RawMessage
	if j == nil || !j.PersistData || json.Unmarshal(d.Data, &obj) != nil || obj == nil || store.JSONHasNUL(d.Data) {
		return nil // as the completion consumer does: such data is not stored
	}
	j.Data = d.Data
	return nil
}
