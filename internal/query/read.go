package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/pending"
	"github.com/agatesched/agate/internal/presence"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// Job is a job as get_job and list_jobs show it.
type Job struct {
	Group            string `json:"group"`
	Name             string `json:"name"`
	Type             string `json:"type"`
	Description      string `json:"description,omitempty"`
	Durable          bool   `json:"durable"`
	Nonconcurrent    bool   `json:"nonconcurrent"`
	RequestsRecovery bool   `json:"requestsRecovery"`
	Timeout          string `json:"timeout,omitempty"` // as JobFired.timeout
	PersistData      bool   `json:"persistData"`
	// Version counts the changes commands made to the job: give it as a command's
	// expectedVersion to refuse the command if the job changed since it was read.
	Version int64           `json:"version"`
	Data    json.RawMessage `json:"data,omitempty"` // get_job only
}

// JobDetail is get_job's result: the job and its triggers.
type JobDetail struct {
	Job
	Triggers []TriggerState `json:"triggers"`
}

// TriggerState is one trigger of a job, in get_job.
type TriggerState struct {
	Group        string     `json:"group"`
	Name         string     `json:"name"`
	State        string     `json:"state"`
	NextFireTime *time.Time `json:"nextFireTime,omitempty"`
}

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	var timeoutMS *int64
	var data []byte
	if err := row.Scan(&j.Group, &j.Name, &j.Type, &j.Description, &j.Durable, &j.Nonconcurrent, &j.RequestsRecovery,
		&timeoutMS, &j.PersistData, &j.Version, &data); err != nil {
		return Job{}, err
	}
	if timeoutMS != nil {
		j.Timeout = (time.Duration(*timeoutMS) * time.Millisecond).String()
	}
	if data != nil {
		j.Data = data
	}
	return j, nil
}

type getJob struct {
	Job Key `json:"job"`
}

func (h *Handler) getJob(ctx context.Context, req *getJob) (any, error) {
	ns := h.cfg.Namespace
	j, err := scanJob(h.pool.QueryRow(ctx, queries.Get("GetJob"), ns, req.Job.Group, req.Job.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("job", "job %s does not exist", req.Job)
	}
	if err != nil {
		return nil, fmt.Errorf("reading job %s: %w", req.Job, err)
	}
	rows, _ := h.pool.Query(ctx, queries.Get("JobTriggers"), ns, req.Job.Group, req.Job.Name)
	trigs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TriggerState, error) {
		var t TriggerState
		err := r.Scan(&t.Group, &t.Name, &t.State, &t.NextFireTime)
		t.NextFireTime = utc(t.NextFireTime)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading the triggers of job %s: %w", req.Job, err)
	}
	return JobDetail{Job: j, Triggers: trigs}, nil
}

type listJobs struct {
	Group string `json:"group"`
	Type  string `json:"type"`
	Page
}

// JobList is list_jobs' result.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"nextCursor,omitempty"`
}

func (h *Handler) listJobs(ctx context.Context, req *listJobs) (any, error) {
	var after Key
	if _, err := decodeCursor("list_jobs", req.Cursor, &after); err != nil {
		return nil, err
	}
	n := req.limit(DefaultLimit)
	rows, _ := h.pool.Query(ctx, queries.Get("ListJobs"), h.cfg.Namespace, opt(req.Group), opt(req.Type),
		after.Group, after.Name, n+1)
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	out := JobList{Jobs: jobs}
	if len(jobs) > n {
		out.Jobs = jobs[:n]
		last := jobs[n-1]
		out.NextCursor = encodeCursor("list_jobs", Key{Group: last.Group, Name: last.Name})
	}
	return out, nil
}

// JobRef names a job and its type.
type JobRef struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Type  string `json:"type"`
}

// Trigger is a trigger as get_trigger and list_triggers show it: the trigger object of
// schedule_job (its schedule, misfire instruction, start and end as stored) and its state.
type Trigger struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Job   JobRef `json:"job"`
	State string `json:"state"`
	trigger.Definition
	Priority         int             `json:"priority"`
	Calendar         string          `json:"calendar,omitempty"`
	NextFireTime     *time.Time      `json:"nextFireTime,omitempty"`
	PreviousFireTime *time.Time      `json:"previousFireTime,omitempty"`
	TimesTriggered   int             `json:"timesTriggered"`
	Version          int64           `json:"version"`        // as Job.Version
	Data             json.RawMessage `json:"data,omitempty"` // get_trigger only
}

func scanTrigger(row pgx.Row) (Trigger, error) {
	var t Trigger
	var schedule, data []byte
	var start time.Time
	var calendar *string
	if err := row.Scan(&t.Group, &t.Name, &t.Job.Group, &t.Job.Name, &t.Job.Type, &t.State, &schedule, &t.Misfire,
		&t.Priority, &start, &t.EndAt, &calendar, &t.NextFireTime, &t.PreviousFireTime, &t.TimesTriggered, &t.Version, &data); err != nil {
		return Trigger{}, err
	}
	misfire := t.Misfire
	// A schedule that no longer reads (the trigger is in ERROR) is shown without its kind.
	_ = json.Unmarshal(schedule, &t.Definition)
	t.Misfire, t.StartAt, t.EndAt = misfire, utc(&start), utc(t.EndAt)
	t.NextFireTime, t.PreviousFireTime = utc(t.NextFireTime), utc(t.PreviousFireTime)
	if calendar != nil {
		t.Calendar = *calendar
	}
	if data != nil {
		t.Data = data
	}
	return t, nil
}

// deletedHint ends the not-found error of a trigger: a trigger's last fire deletes it while its
// execution may still run, which a Quartz user expects to see as COMPLETE.
const deletedHint = " (a trigger's last fire deletes it; history and explain show what became of it, executing its runs)"

type getTrigger struct {
	Trigger Key `json:"trigger"`
}

func (h *Handler) getTrigger(ctx context.Context, req *getTrigger) (any, error) {
	t, err := scanTrigger(h.pool.QueryRow(ctx, queries.Get("GetTrigger"), h.cfg.Namespace, req.Trigger.Group, req.Trigger.Name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("trigger", "trigger %s does not exist%s", req.Trigger, deletedHint)
	}
	if err != nil {
		return nil, fmt.Errorf("reading trigger %s: %w", req.Trigger, err)
	}
	return t, nil
}

type listTriggers struct {
	Group   string `json:"group"`
	State   string `json:"state"`
	Job     *Key   `json:"job"`
	JobType string `json:"jobType"`
	Page
}

// TriggerList is list_triggers' result.
type TriggerList struct {
	Triggers   []Trigger `json:"triggers"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

func (h *Handler) listTriggers(ctx context.Context, req *listTriggers) (any, error) {
	var after Key
	if _, err := decodeCursor("list_triggers", req.Cursor, &after); err != nil {
		return nil, err
	}
	var jg, jn *string
	if req.Job != nil {
		jg, jn = &req.Job.Group, &req.Job.Name
	}
	n := req.limit(DefaultLimit)
	rows, _ := h.pool.Query(ctx, queries.Get("ListTriggers"), h.cfg.Namespace, opt(req.Group), opt(req.State),
		opt(req.JobType), jg, jn, after.Group, after.Name, n+1)
	trigs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Trigger, error) { return scanTrigger(r) })
	if err != nil {
		return nil, fmt.Errorf("listing triggers: %w", err)
	}
	out := TriggerList{Triggers: trigs}
	if len(trigs) > n {
		out.Triggers = trigs[:n]
		last := trigs[n-1]
		out.NextCursor = encodeCursor("list_triggers", Key{Group: last.Group, Name: last.Name})
	}
	return out, nil
}

type nextFireTimes struct {
	Trigger Key        `json:"trigger"`
	Count   int        `json:"count"`
	After   *time.Time `json:"after"`
}

// FireTimes is next_fire_times' result.
type FireTimes struct {
	Trigger   Key         `json:"trigger"`
	State     string      `json:"state"`
	Calendar  string      `json:"calendar,omitempty"`
	FireTimes []time.Time `json:"fireTimes"`
}

// nextFireTimes computes forward from the stored trigger, as the fire step will, with its
// calendar applied; it writes nothing.
func (h *Handler) nextFireTimes(ctx context.Context, req *nextFireTimes) (any, error) {
	out := FireTimes{Trigger: req.Trigger, FireTimes: []time.Time{}}
	err := store.InTx(ctx, h.pool, func(tx pgx.Tx) error {
		var schedule []byte
		var next, prev *time.Time
		var times int
		err := tx.QueryRow(ctx, queries.Get("TriggerSchedule"), h.cfg.Namespace, req.Trigger.Group, req.Trigger.Name).
			Scan(&out.State, &schedule, &next, &prev, &times, &out.Calendar)
		if errors.Is(err, pgx.ErrNoRows) {
			return apierr.NotFound("trigger", "trigger %s does not exist%s", req.Trigger, deletedHint)
		}
		if err != nil {
			return fmt.Errorf("reading trigger %s: %w", req.Trigger, err)
		}
		t, err := trigger.Restore(schedule, next, prev, times)
		if err != nil {
			return &apierr.Error{Code: apierr.CodeFailedPrecondition, Field: "trigger",
				Message: fmt.Sprintf("the schedule of trigger %s cannot be read (%v); replace the trigger", req.Trigger, err)}
		}
		cals, err := store.LoadCalendars(ctx, tx, h.cfg.Namespace, []string{out.Calendar})
		if err != nil {
			return err
		}
		cal, err := cals.For(out.Calendar)
		if err != nil {
			return &apierr.Error{Code: apierr.CodeFailedPrecondition, Field: "trigger",
				Message: fmt.Sprintf("trigger %s cannot be computed: %v", req.Trigger, err)}
		}
		var after time.Time // zero: from the trigger's next fire time, included
		if req.After != nil {
			after = *req.After
		}
		for _, ft := range t.FireTimes(after, req.limit(), cal) {
			out.FireTimes = append(out.FireTimes, ft.UTC())
		}
		return nil
	})
	return out, err
}

func (r *nextFireTimes) limit() int {
	if r.Count == 0 {
		return DefaultCount
	}
	return r.Count
}

type history struct {
	Job     *Key `json:"job"`
	Trigger *Key `json:"trigger"`
	Page
}

// History is history's result: events as they are published (CloudEvents envelopes), newest
// first.
type History struct {
	Events     []events.Envelope `json:"events"`
	NextCursor string            `json:"nextCursor,omitempty"`
}

func (h *Handler) history(ctx context.Context, req *history) (any, error) {
	before := int64(math.MaxInt64)
	if _, err := decodeCursor("history", req.Cursor, &before); err != nil {
		return nil, err
	}
	n := req.limit(DefaultHistory)
	field, key, stmt := "job", req.Job, "JobHistory"
	if req.Trigger != nil {
		field, key, stmt = "trigger", req.Trigger, "TriggerHistory"
	}
	// "<group>.<name>" names one key when neither part has a dot.
	exact := !strings.Contains(key.Group, ".") && !strings.Contains(key.Name, ".")
	var seqs []int64
	var evs []events.Envelope
	err := store.InIndexOrder(ctx, h.pool, queries.Get(stmt), []any{h.cfg.Namespace, key.String(), key.Group, key.Name, before, n + 1, exact},
		func(rows pgx.Rows) (err error) {
			evs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (events.Envelope, error) {
				var e events.Envelope
				var seq int64
				var data []byte
				err := r.Scan(&seq, &e.ID, &e.Type, &e.Source, &e.Time, &e.Subject, &data, &e.TraceParent)
				e.SpecVersion, e.DataContentType, e.Time, e.Data = "1.0", "application/json", e.Time.UTC(), data
				seqs = append(seqs, seq)
				return e, err
			})
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("reading the history of %s %s: %w", field, key, err)
	}
	if len(evs) == 0 && req.Cursor == "" {
		return nil, apierr.NotFound(field, "the event log has nothing about %s %s", field, key)
	}
	out := History{Events: evs}
	if len(evs) > n {
		out.Events = evs[:n]
		out.NextCursor = encodeCursor("history", seqs[n-1])
	}
	return out, nil
}

type executing struct {
	Job     *Key        `json:"job"`
	FireIDs []uuid.UUID `json:"fireIds"`
	Page
}

// Execution is a fire in flight: its fired row, EXECUTING until its outcome is recorded.
type Execution struct {
	FireID           string    `json:"fireId"`
	Job              JobRef    `json:"job"`
	Trigger          Key       `json:"trigger"`
	Instance         string    `json:"instance"`
	ScheduledTime    time.Time `json:"scheduledTime"`
	FiredTime        time.Time `json:"firedTime"`
	Nonconcurrent    bool      `json:"nonconcurrent"`
	RequestsRecovery bool      `json:"requestsRecovery"`
	Recovering       bool      `json:"recovering"`
}

// Executions is executing's result, longest running first.
type Executions struct {
	Executions []Execution `json:"executions"`
	NextCursor string      `json:"nextCursor,omitempty"`
}

// executionKey is where a page of executions starts after.
type executionKey struct {
	FiredTime time.Time `json:"t"`
	FireID    string    `json:"id"`
}

func (h *Handler) executing(ctx context.Context, req *executing) (any, error) {
	var after executionKey
	ok, err := decodeCursor("executing", req.Cursor, &after)
	if err != nil {
		return nil, err
	}
	var afterTime *time.Time
	var afterID *string
	if ok {
		afterTime, afterID = &after.FiredTime, &after.FireID
	}
	var jg, jn *string
	if req.Job != nil {
		jg, jn = &req.Job.Group, &req.Job.Name
	}
	n := req.limit(DefaultLimit)
	// A nil FireIDs is NULL: every fire.
	rows, _ := h.pool.Query(ctx, queries.Get("Executing"), h.cfg.Namespace, jg, jn, afterTime, afterID, n+1, req.FireIDs)
	execs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Execution, error) {
		var x Execution
		err := r.Scan(&x.FireID, &x.Job.Group, &x.Job.Name, &x.Job.Type, &x.Trigger.Group, &x.Trigger.Name, &x.Instance,
			&x.ScheduledTime, &x.FiredTime, &x.Nonconcurrent, &x.RequestsRecovery, &x.Recovering)
		x.ScheduledTime, x.FiredTime = x.ScheduledTime.UTC(), x.FiredTime.UTC()
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	out := Executions{Executions: execs}
	if len(execs) > n {
		out.Executions = execs[:n]
		last := execs[n-1]
		out.NextCursor = encodeCursor("executing", executionKey{FiredTime: last.FiredTime, FireID: last.FireID})
	}
	return out, nil
}

// Calendar is a stored calendar, in add_calendar's form.
type Calendar struct {
	Name     string          `json:"name"`
	Calendar json.RawMessage `json:"calendar"`
	Version  int64           `json:"version"` // as Job.Version
	// Triggers is how many triggers name it (get_calendar only): delete_calendar refuses while
	// any does.
	Triggers *int `json:"triggers,omitempty"`
}

type listCalendars struct {
	Page
}

// CalendarList is list_calendars' result.
type CalendarList struct {
	Calendars  []Calendar `json:"calendars"`
	NextCursor string     `json:"nextCursor,omitempty"`
}

func (h *Handler) listCalendars(ctx context.Context, req *listCalendars) (any, error) {
	var after string
	if _, err := decodeCursor("list_calendars", req.Cursor, &after); err != nil {
		return nil, err
	}
	n := req.limit(DefaultLimit)
	rows, _ := h.pool.Query(ctx, queries.Get("ListCalendars"), h.cfg.Namespace, after, n+1)
	cals, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Calendar, error) {
		var c Calendar
		err := r.Scan(&c.Name, &c.Calendar, &c.Version)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing calendars: %w", err)
	}
	out := CalendarList{Calendars: cals}
	if len(cals) > n {
		out.Calendars = cals[:n]
		out.NextCursor = encodeCursor("list_calendars", cals[n-1].Name)
	}
	return out, nil
}

type getCalendar struct {
	Name string `json:"name"`
}

func (h *Handler) getCalendar(ctx context.Context, req *getCalendar) (any, error) {
	var c Calendar
	var used int
	err := h.pool.QueryRow(ctx, queries.Get("GetCalendar"), h.cfg.Namespace, req.Name).Scan(&c.Name, &c.Calendar, &c.Version, &used)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, apierr.NotFound("name", "calendar %q does not exist", req.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading calendar %q: %w", req.Name, err)
	}
	c.Triggers = &used
	return c, nil
}

type instances struct{}

// Instance is a scheduler node of the namespace, as recovery sees it.
type Instance struct {
	InstanceID      string    `json:"instanceId"`
	LastCheckin     time.Time `json:"lastCheckin"`
	SinceCheckin    string    `json:"sinceCheckin"` // by the database clock
	CheckinInterval string    `json:"checkinInterval"`
	Epoch           int64     `json:"epoch"`
}

// Instances is instances' result.
type Instances struct {
	Instances []Instance `json:"instances"`
}

func (h *Handler) instances(ctx context.Context, _ *instances) (any, error) {
	rows, _ := h.pool.Query(ctx, queries.Get("Instances"), h.cfg.Namespace)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var in Instance
		var intervalMS, sinceMicros int64
		err := r.Scan(&in.InstanceID, &in.LastCheckin, &intervalMS, &in.Epoch, &sinceMicros)
		in.LastCheckin = in.LastCheckin.UTC()
		in.CheckinInterval = (time.Duration(intervalMS) * time.Millisecond).String()
		in.SinceCheckin = (time.Duration(sinceMicros) * time.Microsecond).String()
		return in, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	return Instances{Instances: list}, nil
}

type workers struct{}

// Workers is workers' result: the worker processes heard from lately, and what JetStream knows
// of the workers of each job type.
type Workers struct {
	Workers  []presence.Seen          `json:"workers"`
	JobTypes []pending.WorkerConsumer `json:"jobTypes"`
}

func (h *Handler) workers(ctx context.Context, _ *workers) (any, error) {
	out := Workers{Workers: []presence.Seen{}, JobTypes: []pending.WorkerConsumer{}}
	if h.cfg.Roster != nil {
		out.Workers = append(out.Workers, h.cfg.Roster.Workers()...)
	}
	if h.cfg.JetStream == nil {
		return out, nil
	}
	list, err := pending.WorkerConsumers(ctx, h.cfg.JetStream, h.cfg.Namespace)
	if err != nil {
		return nil, &apierr.Error{Code: apierr.CodeUnavailable, Message: err.Error()}
	}
	out.JobTypes = append(out.JobTypes, list...)
	return out, nil
}
