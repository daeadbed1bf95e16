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
	tx          pgx.Tx
	now         time.Time
	commandID   string
	traceParent string
	evs         []events.Event
}

func (a *applyCtx) event(typ, aggregate, aggregateID, kind string, data any) error {
	ev, err := events.New(typ, events.Source(a.h.cfg.Namespace, a.h.cfg.InstanceID), aggregate, aggregateID,
		events.Subjects(a.h.cfg.Namespace).Evt(kind), a.now, data)
	if err != nil {
		return err
	}
	ev.TraceParent = a.traceParent
	a.evs = append(a.evs, ev)
	return nil
}

// rejection carries a command error out of a transaction so that it rolls back.
type rejection struct{ err *Error }

func (r rejection) Error() string { return r.err.Error() }

func reject(e *Error) error { return rejection{e} }

func (a *applyCtx) scheduleJob(ctx context.Context, c *ScheduleJob) (any, error) {
	ns := a.h.cfg.Namespace
	job := c.Job
	if !slices.Contains(a.h.cfg.JobTypes, job.Type) {
		return nil, reject(invalid("job.type", "unknown job type %q; this scheduler accepts: %s (add more with --job-types)",
			job.Type, strings.Join(a.h.cfg.JobTypes, ", ")))
	}
	var timeoutMilli *int64
	if job.Timeout != "" {
		d, err := trigger.ParseDuration(job.Timeout)
		if err != nil || d <= 0 {
			return nil, reject(invalid("job.timeout", "%q is not a positive duration (use \"30s\", \"5m\" or \"PT5M\")", job.Timeout))
		}
		ms := d.Milliseconds()
		timeoutMilli = &ms
	}
	if len(c.Triggers) == 0 && !job.Durable {
		return nil, reject(invalid("triggers", "a job without triggers must be durable (set job.durable: true), as in Quartz"))
	}
	// Validate every trigger before touching a row, so errors name the first bad field.
	trigs := make([]*trigger.Trigger, len(c.Triggers))
	seen := map[[2]string]bool{}
	for i, ts := range c.Triggers {
		field := fmt.Sprintf("triggers[%d]", i)
		key := [2]string{ts.Group, ts.Name}
		if seen[key] {
			return nil, reject(invalid(field, "trigger %s.%s is listed twice", ts.Group, ts.Name))
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

	var durable bool
	err := a.tx.QueryRow(ctx, queries.Get("JobExists"), ns, job.Group, job.Name).Scan(&durable)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("reading job: %w", err)
	}
	if exists && !c.Replace {
		return nil, reject(&Error{Code: CodeAlreadyExists, Field: "job",
			Message: fmt.Sprintf("job %s.%s already exists; send replace: true to replace it", job.Group, job.Name)})
	}
	data := job.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if _, err := a.tx.Exec(ctx, queries.Get("UpsertJob"), ns, job.Group, job.Name, job.Type, job.Description,
		job.Durable, job.Nonconcurrent, job.RequestsRecovery, timeoutMilli, data); err != nil {
		return nil, fmt.Errorf("storing job: %w", err)
	}
	state := store.StateWaiting
	if job.Nonconcurrent {
		var executing bool
		if err := a.tx.QueryRow(ctx, queries.Get("JobExecuting"), ns, job.Group, job.Name).Scan(&executing); err != nil {
			return nil, fmt.Errorf("reading job executions: %w", err)
		}
		if executing {
			state = store.StateBlocked // Quartz: a non-concurrent job's new trigger waits for the run in progress
		}
	}
	jobRef := events.JobRef{Group: job.Group, Name: job.Name, Type: job.Type}
	result := make([]ScheduledTrigger, len(c.Triggers))
	for i, ts := range c.Triggers {
		field := fmt.Sprintf("triggers[%d]", i)
		var og, on string
		err := a.tx.QueryRow(ctx, queries.Get("TriggerOwner"), ns, ts.Group, ts.Name).Scan(&og, &on)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("reading trigger: %w", err)
		case !c.Replace || og != job.Group || on != job.Name:
			return nil, reject(&Error{Code: CodeAlreadyExists, Field: field,
				Message: fmt.Sprintf("trigger %s.%s already exists (for job %s.%s)", ts.Group, ts.Name, og, on)})
		default:
			if _, err := a.tx.Exec(ctx, queries.Get("DeleteTrigger"), ns, ts.Group, ts.Name); err != nil {
				return nil, fmt.Errorf("replacing trigger: %w", err)
			}
		}
		t := trigs[i]
		schedule, err := json.Marshal(t.Definition)
		if err != nil {
			return nil, fmt.Errorf("encoding trigger schedule: %w", err)
		}
		start := a.now
		if t.StartAt != nil {
			start = *t.StartAt
		}
		priority := 5
		if ts.Priority != nil {
			priority = *ts.Priority
		}
		tdata := ts.Data
		if len(tdata) == 0 {
			tdata = json.RawMessage("{}")
		}
		next := t.NextFireTime.UTC()
		if _, err := a.tx.Exec(ctx, queries.Get("InsertTrigger"), ns, ts.Group, ts.Name, job.Group, job.Name,
			kindOf(t.Definition), schedule, start, t.EndAt, ts.Calendar, priority, misfireOf(t.Definition),
			next, state, nullable(a.traceParent), tdata, store.SlotOf(job.Group, job.Name)); err != nil {
			return nil, fmt.Errorf("storing trigger %s.%s: %w", ts.Group, ts.Name, err)
		}
		result[i] = ScheduledTrigger{Group: ts.Group, Name: ts.Name, NextFireTime: &next}
		if err := a.event(events.TypeTriggerScheduled, events.AggregateTrigger, ts.Group+"."+ts.Name, "trigger",
			map[string]any{"trigger": events.Key{Group: ts.Group, Name: ts.Name}, "job": jobRef,
				"commandId": a.commandID, "nextFireTime": next, "schedule": json.RawMessage(schedule)}); err != nil {
			return nil, err
		}
	}
	return map[string]any{"triggers": result}, nil
}

func (a *applyCtx) calendar(ctx context.Context, name *string, field string) (trigger.Calendar, error) {
	if name == nil || *name == "" {
		return nil, nil
	}
	var raw []byte
	err := a.tx.QueryRow(ctx, queries.Get("LoadCalendar"), a.h.cfg.Namespace, *name).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeNotFound, Field: field + ".calendar",
			Message: fmt.Sprintf("calendar %q does not exist; add it first with add_calendar", *name)})
	}
	if err != nil {
		return nil, fmt.Errorf("reading calendar: %w", err)
	}
	cal, err := trigger.ParseCalendar(raw)
	if err != nil {
		return nil, fmt.Errorf("stored calendar %q is unreadable: %w", *name, err)
	}
	return cal, nil
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
