package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// ScheduleJob is the schedule_job command.
type ScheduleJob struct {
	ID       string        `json:"id"`
	Job      JobSpec       `json:"job"`
	Triggers []TriggerSpec `json:"triggers"`
	Replace  bool          `json:"replace"`
}

// JobSpec is a job as a producer describes it.
type JobSpec struct {
	Group            string          `json:"group"`
	Name             string          `json:"name"`
	Type             string          `json:"type"`
	Data             json.RawMessage `json:"data,omitempty"`
	Nonconcurrent    bool            `json:"nonconcurrent"`
	RequestsRecovery bool            `json:"requestsRecovery"`
	Durable          bool            `json:"durable"`
	Timeout          string          `json:"timeout,omitempty"`
	Description      string          `json:"description,omitempty"`
}

// TriggerSpec is a trigger as a producer describes it: its key, its schedule (the embedded
// trigger.Definition: cron, simple, calendarInterval, dailyTimeInterval, misfire, startAt, endAt)
// and what the scheduler keeps beside the schedule.
type TriggerSpec struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	trigger.Definition
	Priority *int            `json:"priority,omitempty"`
	Calendar *string         `json:"calendar,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
}

// KeyRef names a job or trigger in delete_job and unschedule_trigger.
type KeyRef struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

// DeleteJob is the delete_job command.
type DeleteJob struct {
	ID  string `json:"id"`
	Job KeyRef `json:"job"`
}

// UnscheduleTrigger is the unschedule_trigger command.
type UnscheduleTrigger struct {
	ID      string `json:"id"`
	Trigger KeyRef `json:"trigger"`
}

// ScheduledTrigger is one entry of an accepted schedule_job's result.
type ScheduledTrigger struct {
	Group        string     `json:"group"`
	Name         string     `json:"name"`
	NextFireTime *time.Time `json:"nextFireTime"`
}

// applyCtx is what an apply function needs besides the transaction.
type applyCtx struct {
	h           *Handler
	tx          *outbox.Tx
	now         time.Time
	commandID   string
	traceParent string
	due         time.Time // earliest fire time of the triggers it scheduled (dueAt)
}

// dueAt says the command made a trigger due at t, so that the acquire loop is woken only when
// its next pass would come after t. An apply function that schedules or moves triggers calls it
// for each; one that calls it for none wakes the loop at once.
func (a *applyCtx) dueAt(t time.Time) {
	if a.due.IsZero() || t.Before(a.due) {
		a.due = t
	}
}

func (a *applyCtx) event(typ, aggregate, aggregateID, kind string, data any) error {
	ev, err := events.New(typ, events.Source(a.h.cfg.Namespace, a.h.cfg.InstanceID), aggregate, aggregateID,
		events.Subjects(a.h.cfg.Namespace).Evt(kind), a.now, data)
	if err != nil {
		return err
	}
	ev.TraceParent = a.traceParent
	a.tx.Append(ev)
	return nil
}

// rejection carries a command error out of a transaction so that it rolls back.
type rejection struct{ err *Error }

func (r rejection) Error() string { return r.err.Error() }

func reject(e *Error) error { return rejection{e} }

func (a *applyCtx) scheduleJob(ctx context.Context, c *ScheduleJob) (any, error) {
	timeoutMilli, err := a.checkJob(c)
	if err != nil {
		return nil, err
	}
	trigs, err := a.newTriggers(ctx, c.Triggers)
	if err != nil {
		return nil, err
	}
	if err := a.storeJob(ctx, c.Job, c.Replace, timeoutMilli); err != nil {
		return nil, err
	}
	state, err := a.initialState(ctx, c.Job)
	if err != nil {
		return nil, err
	}
	result := make([]ScheduledTrigger, len(c.Triggers))
	for i := range c.Triggers {
		if result[i], err = a.storeTrigger(ctx, c, i, trigs[i], state); err != nil {
			return nil, err
		}
	}
	return map[string]any{"triggers": result}, nil
}

// checkJob checks what the schema cannot: the job type is one this cluster runs, the timeout a
// positive duration, and a job without triggers durable. It returns the timeout in milliseconds.
func (a *applyCtx) checkJob(c *ScheduleJob) (*int64, error) {
	job := c.Job
	if !slices.Contains(a.h.cfg.JobTypes, job.Type) {
		return nil, reject(invalid("job.type", "unknown job type %q; this scheduler accepts: %s (add more with --job-types)",
			job.Type, strings.Join(a.h.cfg.JobTypes, ", ")))
	}
	if len(c.Triggers) == 0 && !job.Durable {
		return nil, reject(invalid("triggers", "a job without triggers must be durable (set job.durable: true), as in Quartz"))
	}
	if job.Timeout == "" {
		return nil, nil
	}
	d, err := trigger.ParseDuration(job.Timeout)
	if err != nil || d <= 0 {
		return nil, reject(invalid("job.timeout", "%q is not a positive duration (use \"30s\", \"5m\" or \"PT5M\")", job.Timeout))
	}
	ms := d.Milliseconds()
	return &ms, nil
}

// newTriggers validates every trigger and computes its first fire time before a row is
// touched, so an error names the first bad field.
func (a *applyCtx) newTriggers(ctx context.Context, specs []TriggerSpec) ([]*trigger.Trigger, error) {
	trigs := make([]*trigger.Trigger, len(specs))
	seen := map[events.Key]bool{}
	for i, ts := range specs {
		field := fmt.Sprintf("triggers[%d]", i)
		key := events.Key{Group: ts.Group, Name: ts.Name}
		if seen[key] {
			return nil, reject(invalid(field, "trigger %s is listed twice", key))
		}
		seen[key] = true
		cal, err := a.calendar(ctx, ts.Calendar, field)
		if err != nil {
			return nil, err
		}
		t, err := trigger.New(ts.Definition, a.now, cal)
		if err != nil {
			var fe *trigger.FieldError
			if errors.As(err, &fe) {
				return nil, reject(invalid(field+"."+fe.Field, "%s", fe.Message))
			}
			return nil, reject(invalid(field, "%v", err))
		}
		if t.NextFireTime.IsZero() {
			return nil, reject(&Error{Code: CodeInvalidArgument, Field: field,
				Message: "based on its schedule (start, end, calendar) the trigger will never fire"})
		}
		trigs[i] = t
	}
	return trigs, nil
}

// storeJob inserts the job, or replaces it when replace is set.
func (a *applyCtx) storeJob(ctx context.Context, job JobSpec, replace bool, timeoutMilli *int64) error {
	ns := a.h.cfg.Namespace
	var durable bool
	err := a.tx.QueryRow(ctx, queries.Get("JobExists"), ns, job.Group, job.Name).Scan(&durable)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("reading job: %w", err)
	}
	if exists && !replace {
		return reject(&Error{Code: CodeAlreadyExists, Field: "job",
			Message: fmt.Sprintf("job %s.%s already exists; send replace: true to replace it", job.Group, job.Name)})
	}
	if _, err := a.tx.Exec(ctx, queries.Get("UpsertJob"), ns, job.Group, job.Name, job.Type, job.Description,
		job.Durable, job.Nonconcurrent, job.RequestsRecovery, timeoutMilli, jobData(job)); err != nil {
		return fmt.Errorf("storing job: %w", err)
	}
	return nil
}

// jobData is the job's data as stored: {} when it has none.
func jobData(job JobSpec) json.RawMessage {
	if len(job.Data) == 0 {
		return json.RawMessage("{}")
	}
	return job.Data
}

// initialState is the state of the job's new triggers: BLOCKED while a non-concurrent job runs
// (Quartz: a new trigger waits for the run in progress), else WAITING.
func (a *applyCtx) initialState(ctx context.Context, job JobSpec) (string, error) {
	if !job.Nonconcurrent {
		return store.StateWaiting, nil
	}
	var executing bool
	if err := a.tx.QueryRow(ctx, queries.Get("JobExecuting"), a.h.cfg.Namespace, job.Group, job.Name).Scan(&executing); err != nil {
		return "", fmt.Errorf("reading job executions: %w", err)
	}
	if executing {
		return store.StateBlocked, nil
	}
	return store.StateWaiting, nil
}

// storeTrigger inserts trigger i of c (replacing the job's own trigger of that key when replace
// is set) and logs TriggerScheduled.
func (a *applyCtx) storeTrigger(ctx context.Context, c *ScheduleJob, i int, t *trigger.Trigger, state string) (ScheduledTrigger, error) {
	ns, job, ts := a.h.cfg.Namespace, c.Job, c.Triggers[i]
	field := fmt.Sprintf("triggers[%d]", i)
	var og, on string
	err := a.tx.QueryRow(ctx, queries.Get("TriggerOwner"), ns, ts.Group, ts.Name).Scan(&og, &on)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return ScheduledTrigger{}, fmt.Errorf("reading trigger: %w", err)
	case !c.Replace || og != job.Group || on != job.Name:
		return ScheduledTrigger{}, reject(&Error{Code: CodeAlreadyExists, Field: field,
			Message: fmt.Sprintf("trigger %s.%s already exists (for job %s.%s)", ts.Group, ts.Name, og, on)})
	default:
		if _, err := a.tx.Exec(ctx, queries.Get("DeleteTrigger"), ns, ts.Group, ts.Name); err != nil {
			return ScheduledTrigger{}, fmt.Errorf("replacing trigger: %w", err)
		}
	}
	row, err := a.triggerRow(job, ts, t, state)
	if err != nil {
		return ScheduledTrigger{}, err
	}
	if _, err := a.tx.Exec(ctx, queries.Get("InsertTrigger"), append([]any{ns}, row.args()...)...); err != nil {
		return ScheduledTrigger{}, fmt.Errorf("storing trigger %s.%s: %w", ts.Group, ts.Name, err)
	}
	return row.scheduled(), a.triggerScheduled(job, row)
}

// triggerRow is a trigger's row as schedule_job stores it: InsertTrigger's parameters after the
// namespace (args), also inserted in bulk (bulk.go).
type triggerRow struct {
	Group, Name, JobGroup, JobName, Kind string
	Schedule                             []byte
	Start                                time.Time
	End                                  *time.Time
	Calendar                             *string
	Priority                             int
	Misfire                              string
	Next                                 time.Time
	State                                string
	TraceParent                          *string
	Data                                 json.RawMessage
	Slot                                 int
}

func (a *applyCtx) triggerRow(job JobSpec, ts TriggerSpec, t *trigger.Trigger, state string) (triggerRow, error) {
	schedule, err := json.Marshal(t.Definition)
	if err != nil {
		return triggerRow{}, fmt.Errorf("encoding trigger schedule: %w", err)
	}
	r := triggerRow{Group: ts.Group, Name: ts.Name, JobGroup: job.Group, JobName: job.Name, Kind: kindOf(t.Definition),
		Schedule: schedule, Start: a.now, End: t.EndAt, Calendar: ts.Calendar, Priority: 5, Misfire: misfireOf(t.Definition),
		Next: t.NextFireTime.UTC(), State: state, TraceParent: nullable(a.traceParent), Data: ts.Data,
		Slot: store.SlotOf(job.Group, job.Name)}
	if t.StartAt != nil {
		r.Start = *t.StartAt
	}
	if ts.Priority != nil {
		r.Priority = *ts.Priority
	}
	if len(r.Data) == 0 {
		r.Data = json.RawMessage("{}")
	}
	return r, nil
}

func (r triggerRow) args() []any {
	return []any{r.Group, r.Name, r.JobGroup, r.JobName, r.Kind, r.Schedule, r.Start, r.End, r.Calendar, r.Priority,
		r.Misfire, r.Next, r.State, r.TraceParent, r.Data, r.Slot}
}

func (r triggerRow) scheduled() ScheduledTrigger {
	next := r.Next
	return ScheduledTrigger{Group: r.Group, Name: r.Name, NextFireTime: &next}
}

// triggerScheduled logs TriggerScheduled for a stored trigger and notes when it is due.
func (a *applyCtx) triggerScheduled(job JobSpec, r triggerRow) error {
	a.dueAt(r.Next)
	key := events.Key{Group: r.Group, Name: r.Name}
	return a.event(events.TypeTriggerScheduled, events.AggregateTrigger, key.String(), "trigger",
		map[string]any{"trigger": key, "job": events.JobRef{Group: job.Group, Name: job.Name, Type: job.Type},
			"commandId": a.commandID, "nextFireTime": r.Next, "schedule": json.RawMessage(r.Schedule)})
}

func (a *applyCtx) calendar(ctx context.Context, name *string, field string) (trigger.Calendar, error) {
	if name == nil || *name == "" {
		return nil, nil
	}
	cals, err := store.LoadCalendars(ctx, a.tx, a.h.cfg.Namespace, []string{*name})
	if err != nil {
		return nil, err
	}
	if !cals.Has(*name) {
		return nil, reject(&Error{Code: CodeNotFound, Field: field + ".calendar",
			Message: fmt.Sprintf("calendar %q does not exist; add it first with add_calendar", *name)})
	}
	return cals.For(*name)
}

func (a *applyCtx) deleteJob(ctx context.Context, c *DeleteJob) (any, error) {
	ns := a.h.cfg.Namespace
	var durable bool
	err := a.tx.QueryRow(ctx, queries.Get("JobExists"), ns, c.Job.Group, c.Job.Name).Scan(&durable)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeNotFound, Field: "job",
			Message: fmt.Sprintf("job %s.%s does not exist", c.Job.Group, c.Job.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("reading job: %w", err)
	}
	if _, err := a.tx.Exec(ctx, queries.Get("DeleteJobTriggers"), ns, c.Job.Group, c.Job.Name); err != nil {
		return nil, fmt.Errorf("deleting triggers: %w", err)
	}
	if _, err := a.tx.Exec(ctx, queries.Get("DeleteJob"), ns, c.Job.Group, c.Job.Name); err != nil {
		return nil, fmt.Errorf("deleting job: %w", err)
	}
	key := events.Key{Group: c.Job.Group, Name: c.Job.Name}
	return nil, a.event(events.TypeJobDeleted, events.AggregateJob, key.String(), "job",
		map[string]any{"job": key, "commandId": a.commandID})
}

func (a *applyCtx) unscheduleTrigger(ctx context.Context, c *UnscheduleTrigger) (any, error) {
	ns := a.h.cfg.Namespace
	var jg, jn string
	err := a.tx.QueryRow(ctx, queries.Get("DeleteTrigger"), ns, c.Trigger.Group, c.Trigger.Name).Scan(&jg, &jn)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeNotFound, Field: "trigger",
			Message: fmt.Sprintf("trigger %s.%s does not exist", c.Trigger.Group, c.Trigger.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("deleting trigger: %w", err)
	}
	tag, err := a.tx.Exec(ctx, queries.Get("DeleteOrphanJob"), ns, jg, jn)
	if err != nil {
		return nil, fmt.Errorf("deleting job left without triggers: %w", err)
	}
	tkey := events.Key{Group: c.Trigger.Group, Name: c.Trigger.Name}
	jkey := events.Key{Group: jg, Name: jn}
	if err := a.event(events.TypeTriggerUnscheduled, events.AggregateTrigger, tkey.String(), "trigger",
		map[string]any{"trigger": tkey, "job": jkey, "commandId": a.commandID}); err != nil {
		return nil, err
	}
	if tag.RowsAffected() > 0 {
		return nil, a.event(events.TypeJobDeleted, events.AggregateJob, jkey.String(), "job",
			map[string]any{"job": jkey, "commandId": a.commandID, "reason": "no triggers left"})
	}
	return nil, nil
}

// AddCalendar is the add_calendar command.
type AddCalendar struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Calendar json.RawMessage `json:"calendar"`
	Replace  bool            `json:"replace"`
}

// DeleteCalendar is the delete_calendar command.
type DeleteCalendar struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

func (a *applyCtx) addCalendar(ctx context.Context, c *AddCalendar) (any, error) {
	if _, err := trigger.ParseCalendar(c.Calendar); err != nil {
		var fe *trigger.FieldError
		if errors.As(err, &fe) {
			return nil, reject(invalid(strings.TrimSuffix("calendar."+fe.Field, "."), "%s", fe.Message))
		}
		return nil, reject(invalid("calendar", "%v", err))
	}
	var one int
	err := a.tx.QueryRow(ctx, queries.Get("UpsertCalendar"), a.h.cfg.Namespace, c.Name, c.Calendar, c.Replace).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeAlreadyExists, Field: "name",
			Message: fmt.Sprintf("calendar %q already exists; send replace: true to replace it", c.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("storing calendar: %w", err)
	}
	return nil, a.event(events.TypeCalendarAdded, events.AggregateCalendar, c.Name, "calendar",
		map[string]any{"name": c.Name, "calendar": c.Calendar, "commandId": a.commandID})
}

func (a *applyCtx) deleteCalendar(ctx context.Context, c *DeleteCalendar) (any, error) {
	ns := a.h.cfg.Namespace
	var users int
	if err := a.tx.QueryRow(ctx, queries.Get("CalendarInUse"), ns, c.Name).Scan(&users); err != nil {
		return nil, fmt.Errorf("reading calendar users: %w", err)
	}
	if users > 0 {
		return nil, reject(&Error{Code: CodeFailedPrecondition, Field: "name",
			Message: fmt.Sprintf("calendar %q is used by %d trigger(s); unschedule them first", c.Name, users)})
	}
	tag, err := a.tx.Exec(ctx, queries.Get("DeleteCalendar"), ns, c.Name)
	if err != nil {
		return nil, fmt.Errorf("deleting calendar: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return nil, reject(&Error{Code: CodeNotFound, Field: "name", Message: fmt.Sprintf("calendar %q does not exist", c.Name)})
	}
	return nil, a.event(events.TypeCalendarDeleted, events.AggregateCalendar, c.Name, "calendar",
		map[string]any{"name": c.Name, "commandId": a.commandID})
}

func kindOf(d trigger.Definition) string {
	switch {
	case d.Cron != nil:
		return "cron"
	case d.CalendarInterval != nil:
		return "calendar_interval"
	case d.DailyTimeInterval != nil:
		return "daily_time_interval"
	default:
		return "simple"
	}
}

func misfireOf(d trigger.Definition) string {
	if d.Misfire == "" {
		return "smart_policy"
	}
	return d.Misfire
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
