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
	// ExpectedVersion, with replace, is the version of the job it replaces.
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
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
	PersistData      bool            `json:"persistData"`
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
	ID              string `json:"id"`
	Job             KeyRef `json:"job"`
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
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
	// replaced holds the versions of triggers deleted by this command to be stored again under
	// the same key: the new row's version follows on, so a reader's version never comes back.
	replaced map[events.Key]int64
	due      time.Time // earliest fire time of the triggers it scheduled (dueAt)
}

// checkVersion refuses the command (failed_precondition, field expectedVersion) when expected
// is set and the version of what the query reads (locking its row) differs, or it does not exist.
func (a *applyCtx) checkVersion(ctx context.Context, expected *int64, what, query string, args ...any) error {
	if expected == nil {
		return nil
	}
	var v int64
	err := a.tx.QueryRow(ctx, queries.Get(query), append([]any{a.h.cfg.Namespace}, args...)...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return reject(&Error{Code: CodeFailedPrecondition, Field: "expectedVersion",
			Message: fmt.Sprintf("%s does not exist, so it is not at version %d", what, *expected)})
	}
	if err != nil {
		return fmt.Errorf("reading the version of %s: %w", what, err)
	}
	if v != *expected {
		return reject(&Error{Code: CodeFailedPrecondition, Field: "expectedVersion",
			Message: fmt.Sprintf("%s is at version %d, not %d: it changed since it was read; read it again and retry", what, v, *expected)})
	}
	return nil
}

func (a *applyCtx) checkJobVersion(ctx context.Context, expected *int64, group, name string) error {
	return a.checkVersion(ctx, expected, "job "+group+"."+name, "JobVersion", group, name)
}

func (a *applyCtx) checkTriggerVersion(ctx context.Context, expected *int64, k KeyRef) error {
	return a.checkVersion(ctx, expected, "trigger "+k.Group+"."+k.Name, "TriggerVersion", k.Group, k.Name)
}

func (a *applyCtx) checkCalendarVersion(ctx context.Context, expected *int64, name string) error {
	return a.checkVersion(ctx, expected, fmt.Sprintf("calendar %q", name), "CalendarVersion", name)
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
	if len(c.Triggers) == 0 && !c.Job.Durable {
		return nil, reject(invalid("triggers", "a job without triggers must be durable (set job.durable: true), as in Quartz"))
	}
	timeoutMilli, err := a.checkJob(c.Job)
	if err != nil {
		return nil, err
	}
	if err := a.checkJobVersion(ctx, c.ExpectedVersion, c.Job.Group, c.Job.Name); err != nil {
		return nil, err
	}
	trigs, err := a.newTriggers(ctx, c.Triggers)
	if err != nil {
		return nil, err
	}
	if _, err := a.storeJob(ctx, c.Job, c.Replace, timeoutMilli); err != nil {
		return nil, err
	}
	job := jobOf(c.Job)
	result := make([]ScheduledTrigger, len(c.Triggers))
	for i, ts := range c.Triggers {
		if result[i], err = a.storeTrigger(ctx, job, ts, fmt.Sprintf("triggers[%d]", i), trigs[i], c.Replace); err != nil {
			return nil, err
		}
	}
	return map[string]any{"triggers": result}, nil
}

// checkJob checks what the schema cannot: the job type is one this cluster runs and the timeout
// a positive duration. It returns the timeout in milliseconds.
func (a *applyCtx) checkJob(job JobSpec) (*int64, error) {
	if !slices.Contains(a.h.cfg.JobTypes, job.Type) {
		return nil, reject(invalid("job.type", "unknown job type %q; this scheduler accepts: %s (add more with --job-types)",
			job.Type, strings.Join(a.h.cfg.JobTypes, ", ")))
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

// storeJob inserts the job, or replaces it when replace is set; it reports whether it existed.
func (a *applyCtx) storeJob(ctx context.Context, job JobSpec, replace bool, timeoutMilli *int64) (bool, error) {
	ns := a.h.cfg.Namespace
	var durable bool
	err := a.tx.QueryRow(ctx, queries.Get("JobExists"), ns, job.Group, job.Name).Scan(&durable)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("reading job: %w", err)
	}
	if exists && !replace {
		return true, reject(&Error{Code: CodeAlreadyExists, Field: "job",
			Message: fmt.Sprintf("job %s.%s already exists; send replace: true to replace it", job.Group, job.Name)})
	}
	if _, err := a.tx.Exec(ctx, queries.Get("UpsertJob"), ns, job.Group, job.Name, job.Type, job.Description,
		job.Durable, job.Nonconcurrent, job.RequestsRecovery, timeoutMilli, jobData(job), job.PersistData); err != nil {
		return exists, fmt.Errorf("storing job: %w", err)
	}
	return exists, a.jobAdded(job, exists)
}

// jobAdded logs JobAdded for a job stored (or replaced) with its whole definition, which is
// what replay stores in job_details.
func (a *applyCtx) jobAdded(job JobSpec, replaced bool) error {
	key := events.Key{Group: job.Group, Name: job.Name}
	return a.event(events.TypeJobAdded, events.AggregateJob, key.String(), "job",
		jobAddedData{CommandID: a.commandID, Job: job, Replaced: replaced})
}

// jobAddedData is JobAdded's data. Its fields, as events.TriggerScheduled's, are in the order of
// their JSON names, the order in which encoding/json wrote them from the maps they once were.
type jobAddedData struct {
	CommandID string  `json:"commandId"`
	Job       JobSpec `json:"job"`
	Replaced  bool    `json:"replaced"`
}

// jobData is the job's data as stored: {} when it has none.
func jobData(job JobSpec) json.RawMessage {
	if len(job.Data) == 0 {
		return json.RawMessage("{}")
	}
	return job.Data
}

// storedJob is what a trigger needs to know about its job.
type storedJob struct {
	events.JobRef
	Nonconcurrent bool
}

func jobOf(j JobSpec) storedJob {
	return storedJob{JobRef: events.JobRef{Group: j.Group, Name: j.Name, Type: j.Type}, Nonconcurrent: j.Nonconcurrent}
}

// loadJob reads an existing job, locking its row; field names it in a not_found rejection.
func (a *applyCtx) loadJob(ctx context.Context, k KeyRef, field string) (storedJob, error) {
	j := storedJob{JobRef: events.JobRef{Group: k.Group, Name: k.Name}}
	err := a.tx.QueryRow(ctx, queries.Get("LoadJob"), a.h.cfg.Namespace, k.Group, k.Name).Scan(&j.Type, &j.Nonconcurrent)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, reject(&Error{Code: CodeNotFound, Field: field, Message: fmt.Sprintf("job %s.%s does not exist", k.Group, k.Name)})
	}
	if err != nil {
		return j, fmt.Errorf("reading job %s.%s: %w", k.Group, k.Name, err)
	}
	return j, nil
}

// storeTrigger inserts trigger ts of job (replacing the job's own trigger of that key when
// replace is set), in the state InsertTrigger decides (paused groups, a running non-concurrent
// job), and logs TriggerScheduled; field names it in rejections.
func (a *applyCtx) storeTrigger(ctx context.Context, job storedJob, ts TriggerSpec, field string, t *trigger.Trigger, replace bool) (ScheduledTrigger, error) {
	ns := a.h.cfg.Namespace
	var og, on string
	err := a.tx.QueryRow(ctx, queries.Get("TriggerOwner"), ns, ts.Group, ts.Name).Scan(&og, &on)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return ScheduledTrigger{}, fmt.Errorf("reading trigger: %w", err)
	case !replace || og != job.Group || on != job.Name:
		return ScheduledTrigger{}, reject(&Error{Code: CodeAlreadyExists, Field: field,
			Message: fmt.Sprintf("trigger %s.%s already exists (for job %s.%s)", ts.Group, ts.Name, og, on)})
	default:
		if err := a.deleteTrigger(ctx, ts.Group, ts.Name, nil); err != nil {
			return ScheduledTrigger{}, fmt.Errorf("replacing trigger: %w", err)
		}
	}
	row, err := a.triggerRow(job.JobRef, ts, t, store.StateWaiting)
	if err != nil {
		return ScheduledTrigger{}, err
	}
	args := append(append([]any{ns}, row.args()...), allGroupsPaused, job.Nonconcurrent)
	if err := a.tx.QueryRow(ctx, queries.Get("InsertTrigger"), args...).Scan(&row.State); err != nil {
		return ScheduledTrigger{}, fmt.Errorf("storing trigger %s.%s: %w", ts.Group, ts.Name, err)
	}
	return row.scheduled(), a.triggerScheduled(job.JobRef, row)
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
	Version                              int64 // 1, or one more than the trigger it replaces under its key
}

func (a *applyCtx) triggerRow(job events.JobRef, ts TriggerSpec, t *trigger.Trigger, state string) (triggerRow, error) {
	schedule, err := json.Marshal(t.Definition)
	if err != nil {
		return triggerRow{}, fmt.Errorf("encoding trigger schedule: %w", err)
	}
	r := triggerRow{Group: ts.Group, Name: ts.Name, JobGroup: job.Group, JobName: job.Name, Kind: kindOf(t.Definition),
		Schedule: schedule, Start: a.now, End: t.EndAt, Calendar: ts.Calendar, Priority: 5, Misfire: misfireOf(t.Definition),
		Next: t.NextFireTime.UTC(), State: state, TraceParent: nullable(a.traceParent), Data: ts.Data,
		Slot: store.SlotOf(job.Group, job.Name), Version: a.replaced[events.Key{Group: ts.Group, Name: ts.Name}] + 1}
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
		r.Misfire, r.Next, r.State, r.TraceParent, r.Data, r.Slot, r.Version}
}

func (r triggerRow) scheduled() ScheduledTrigger {
	next := r.Next
	return ScheduledTrigger{Group: r.Group, Name: r.Name, NextFireTime: &next}
}

// triggerScheduled logs TriggerScheduled for a stored trigger and notes when it is due.
func (a *applyCtx) triggerScheduled(job events.JobRef, r triggerRow) error {
	a.dueAt(r.Next)
	key := events.Key{Group: r.Group, Name: r.Name}
	return a.event(events.TypeTriggerScheduled, events.AggregateTrigger, key.String(), "trigger",
		events.TriggerScheduled{Calendar: r.Calendar, CommandID: a.commandID, Data: r.Data, EndTime: r.End, Job: job,
			Kind: r.Kind, Misfire: r.Misfire, NextFireTime: &r.Next, Priority: r.Priority, Schedule: r.Schedule,
			StartTime: r.Start.UTC(), State: r.State, Trigger: key, Version: r.Version})
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

// deleteTrigger deletes a trigger and remembers its version for a trigger stored again under
// its key; job, when not nil, receives the trigger's job. It returns pgx.ErrNoRows when the
// trigger does not exist.
func (a *applyCtx) deleteTrigger(ctx context.Context, group, name string, job *KeyRef) error {
	var jk KeyRef
	var v int64
	if err := a.tx.QueryRow(ctx, queries.Get("DeleteTrigger"), a.h.cfg.Namespace, group, name).Scan(&jk.Group, &jk.Name, &v); err != nil {
		return err
	}
	if a.replaced == nil {
		a.replaced = map[events.Key]int64{}
	}
	a.replaced[events.Key{Group: group, Name: name}] = v
	if job != nil {
		*job = jk
	}
	return nil
}

func (a *applyCtx) deleteJob(ctx context.Context, c *DeleteJob) (any, error) {
	ns := a.h.cfg.Namespace
	if err := a.checkJobVersion(ctx, c.ExpectedVersion, c.Job.Group, c.Job.Name); err != nil {
		return nil, err
	}
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

func (a *applyCtx) unscheduleTrigger(ctx context.Context, c *TriggerRef) (any, error) {
	ns := a.h.cfg.Namespace
	if err := a.checkTriggerVersion(ctx, c.ExpectedVersion, c.Trigger); err != nil {
		return nil, err
	}
	var jk KeyRef
	err := a.deleteTrigger(ctx, c.Trigger.Group, c.Trigger.Name, &jk)
	jg, jn := jk.Group, jk.Name
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
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Calendar        json.RawMessage `json:"calendar"`
	Replace         bool            `json:"replace"`
	ExpectedVersion *int64          `json:"expectedVersion,omitempty"`
}

// DeleteCalendar is the delete_calendar command.
type DeleteCalendar struct {
	ID              string `json:"id"`
	Name            string `json:"name"`
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
}

func (a *applyCtx) addCalendar(ctx context.Context, c *AddCalendar) (any, error) {
	cal, err := trigger.ParseCalendar(c.Calendar)
	if err != nil {
		var fe *trigger.FieldError
		if errors.As(err, &fe) {
			return nil, reject(invalid(strings.TrimSuffix("calendar."+fe.Field, "."), "%s", fe.Message))
		}
		return nil, reject(invalid("calendar", "%v", err))
	}
	if err := a.checkCalendarVersion(ctx, c.ExpectedVersion, c.Name); err != nil {
		return nil, err
	}
	var replaced bool
	err = a.tx.QueryRow(ctx, queries.Get("UpsertCalendar"), a.h.cfg.Namespace, c.Name, c.Calendar, c.Replace).Scan(&replaced)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeAlreadyExists, Field: "name",
			Message: fmt.Sprintf("calendar %q already exists; send replace: true to replace it", c.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("storing calendar: %w", err)
	}
	if err := a.event(events.TypeCalendarAdded, events.AggregateCalendar, c.Name, "calendar",
		map[string]any{"name": c.Name, "calendar": c.Calendar, "replaced": replaced, "commandId": a.commandID}); err != nil {
		return nil, err
	}
	if !replaced {
		return nil, nil
	}
	n, err := a.applyCalendar(ctx, c.Name, cal)
	return map[string]any{"updated": n}, err
}

// applyCalendar recomputes the next fire time of every trigger that uses the calendar just
// replaced (Quartz's storeCalendar with updateTriggers). A trigger that will not fire again is
// COMPLETE; a claim made ahead on one is given up (ACQUIRED → WAITING: the fire step drops it);
// paused and blocked triggers stay so. It returns how many triggers it updated.
func (a *applyCtx) applyCalendar(ctx context.Context, name string, cal trigger.Calendar) (int, error) {
	ns := a.h.cfg.Namespace
	rows, err := a.tx.Query(ctx, queries.Get("CalendarTriggers"), ns, name)
	if err != nil {
		return 0, fmt.Errorf("reading the triggers of calendar %q: %w", name, err)
	}
	ms, err := pgx.CollectRows(rows, store.ScanTriggerTimes)
	if err != nil {
		return 0, fmt.Errorf("reading the triggers of calendar %q: %w", name, err)
	}
	var g, n []string
	var next []*time.Time
	broken := map[events.Key]string{}
	for _, m := range ms {
		t, err := trigger.Restore(m.Schedule, &m.Next, m.Prev, m.Times)
		if err != nil {
			broken[m.Key] = err.Error()
			continue
		}
		t.UpdateWithNewCalendar(cal, a.now, a.h.cfg.MisfireThreshold)
		g, n, next = append(g, m.Key.Group), append(n, m.Key.Name), append(next, store.NullTime(t.NextFireTime))
		if err := a.event(events.TypeTriggerUpdated, events.AggregateTrigger, m.Key.String(), "trigger",
			map[string]any{"trigger": m.Key, "nextFireTime": store.NullTime(t.NextFireTime),
				"reason": fmt.Sprintf("calendar %q replaced", name), "commandId": a.commandID}); err != nil {
			return 0, err
		}
	}
	if len(g) > 0 {
		if _, err := a.tx.Exec(ctx, queries.Get("SetNextFireTimes"), ns, g, n, next); err != nil {
			return 0, fmt.Errorf("updating the triggers of calendar %q: %w", name, err)
		}
	}
	evs, err := store.SetTriggerError(ctx, a.tx, events.Origin{Namespace: ns, InstanceID: a.h.cfg.InstanceID}, broken, a.now)
	a.tx.Append(evs...)
	return len(g), err
}

func (a *applyCtx) deleteCalendar(ctx context.Context, c *DeleteCalendar) (any, error) {
	ns := a.h.cfg.Namespace
	if err := a.checkCalendarVersion(ctx, c.ExpectedVersion, c.Name); err != nil {
		return nil, err
	}
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
