package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/trigger"
)

// The commands that steer existing jobs and triggers, with Quartz's semantics (its
// JobStoreSupport: storeJob, storeTrigger, replaceTrigger, pauseTrigger, resumeTrigger,
// pauseTriggerGroup, resumeTriggerGroup, pauseAll, resumeAll, triggerJob).

// allGroupsPaused is Quartz's marker row in paused_trigger_grps for pause_all.
const allGroupsPaused = store.AllGroupsPaused

// manualGroup is the group of the one-shot triggers trigger_job creates (Quartz's
// Scheduler.DEFAULT_GROUP, with names "MT_<random>").
const manualGroup = "DEFAULT"

// AddJob is the add_job command: a durable job stored without triggers.
type AddJob struct {
	ID      string  `json:"id"`
	Job     JobSpec `json:"job"`
	Replace bool    `json:"replace"`
	// ExpectedVersion, with replace, is the version of the job it replaces.
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
}

// ScheduleTrigger is the schedule_trigger command: a new trigger for an existing job.
type ScheduleTrigger struct {
	ID      string      `json:"id"`
	Job     KeyRef      `json:"job"`
	Trigger TriggerSpec `json:"trigger"`
}

// RescheduleTrigger is the reschedule_trigger command: a trigger replaced by another (of any
// kind, under the same key or a new one) for the same job.
type RescheduleTrigger struct {
	ID              string      `json:"id"`
	Trigger         KeyRef      `json:"trigger"`
	NewTrigger      TriggerSpec `json:"newTrigger"`
	ExpectedVersion *int64      `json:"expectedVersion,omitempty"`
}

// TriggerRef is the body of the commands that name one trigger: unschedule_trigger,
// pause_trigger and resume_trigger.
type TriggerRef struct {
	ID              string `json:"id"`
	Trigger         KeyRef `json:"trigger"`
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
}

// GroupRef is the body of pause_group and resume_group.
type GroupRef struct {
	ID    string `json:"id"`
	Group string `json:"group"`
}

// All is the body of pause_all and resume_all.
type All struct {
	ID string `json:"id"`
}

// TriggerJob is the trigger_job command: fire a job now, once, with extra data.
type TriggerJob struct {
	ID   string          `json:"id"`
	Job  KeyRef          `json:"job"`
	Data json.RawMessage `json:"data,omitempty"`
}

func (a *applyCtx) addJob(ctx context.Context, c *AddJob) (any, error) {
	if !c.Job.Durable {
		return nil, reject(invalid("job.durable", "a job added without triggers must be durable (set job.durable: true), as in Quartz; "+
			"to add a job with its triggers use schedule_job"))
	}
	timeoutMilli, err := a.checkJob(c.Job)
	if err != nil {
		return nil, err
	}
	if err := a.checkJobVersion(ctx, c.ExpectedVersion, c.Job.Group, c.Job.Name); err != nil {
		return nil, err
	}
	_, err = a.storeJob(ctx, c.Job, c.Replace, timeoutMilli)
	return nil, err
}

func (a *applyCtx) scheduleTrigger(ctx context.Context, c *ScheduleTrigger) (any, error) {
	job, err := a.loadJob(ctx, c.Job, "job")
	if err != nil {
		return nil, err
	}
	trigs, err := a.newTriggers(ctx, []TriggerSpec{c.Trigger})
	if err != nil {
		return nil, renameField(err, "triggers[0]", "trigger")
	}
	st, err := a.storeTrigger(ctx, job, c.Trigger, "trigger", trigs[0], false)
	if err != nil {
		return nil, err
	}
	return map[string]any{"trigger": st}, nil
}

func (a *applyCtx) rescheduleTrigger(ctx context.Context, c *RescheduleTrigger) (any, error) {
	if err := a.checkTriggerVersion(ctx, c.ExpectedVersion, c.Trigger); err != nil {
		return nil, err
	}
	var jk KeyRef
	err := a.deleteTrigger(ctx, c.Trigger.Group, c.Trigger.Name, &jk)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeNotFound, Field: "trigger",
			Message: fmt.Sprintf("trigger %s.%s does not exist", c.Trigger.Group, c.Trigger.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("replacing trigger: %w", err)
	}
	job, err := a.loadJob(ctx, jk, "trigger")
	if err != nil {
		return nil, err
	}
	trigs, err := a.newTriggers(ctx, []TriggerSpec{c.NewTrigger})
	if err != nil {
		return nil, renameField(err, "triggers[0]", "newTrigger")
	}
	st, err := a.storeTrigger(ctx, job, c.NewTrigger, "newTrigger", trigs[0], false)
	if err != nil {
		return nil, err
	}
	old := events.Key{Group: c.Trigger.Group, Name: c.Trigger.Name}
	if err := a.event(events.TypeTriggerRescheduled, events.AggregateTrigger, old.String(), "trigger",
		map[string]any{"trigger": old, "newTrigger": events.Key{Group: st.Group, Name: st.Name}, "job": job.JobRef,
			"commandId": a.commandID}); err != nil {
		return nil, err
	}
	return map[string]any{"trigger": st}, nil
}

// renameField moves a rejection's field from under prefix to under name: the trigger checks
// name the triggers of schedule_job, triggers[i].
func renameField(err error, prefix, name string) error {
	var rej rejection
	if errors.As(err, &rej) && strings.HasPrefix(rej.err.Field, prefix) {
		e := *rej.err
		e.Field = name + strings.TrimPrefix(e.Field, prefix)
		return reject(&e)
	}
	return err
}

func (a *applyCtx) pauseTrigger(ctx context.Context, c *TriggerRef) (any, error) {
	if err := a.checkTriggerVersion(ctx, c.ExpectedVersion, c.Trigger); err != nil {
		return nil, err
	}
	var from, to string
	err := a.tx.QueryRow(ctx, queries.Get("PauseTrigger"), a.h.cfg.Namespace, c.Trigger.Group, c.Trigger.Name).Scan(&from, &to)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, reject(&Error{Code: CodeNotFound, Field: "trigger",
			Message: fmt.Sprintf("trigger %s.%s does not exist", c.Trigger.Group, c.Trigger.Name)})
	}
	if err != nil {
		return nil, fmt.Errorf("pausing trigger: %w", err)
	}
	if from == to {
		return map[string]any{"state": to}, nil // already paused, or in a state Quartz does not pause
	}
	k := events.Key{Group: c.Trigger.Group, Name: c.Trigger.Name}
	return map[string]any{"state": to}, a.event(events.TypeTriggerPaused, events.AggregateTrigger, k.String(), "trigger",
		map[string]any{"trigger": k, "from": from, "state": to, "commandId": a.commandID})
}

func (a *applyCtx) resumeTrigger(ctx context.Context, c *TriggerRef) (any, error) {
	if err := a.checkTriggerVersion(ctx, c.ExpectedVersion, c.Trigger); err != nil {
		return nil, err
	}
	var exists bool
	if err := a.tx.QueryRow(ctx, queries.Get("TriggerExists"), a.h.cfg.Namespace, c.Trigger.Group, c.Trigger.Name).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading trigger: %w", err)
	}
	if !exists {
		return nil, reject(&Error{Code: CodeNotFound, Field: "trigger",
			Message: fmt.Sprintf("trigger %s.%s does not exist", c.Trigger.Group, c.Trigger.Name)})
	}
	resumed, err := a.resume(ctx, c.Trigger.Group, &c.Trigger.Name)
	if err != nil {
		return nil, err
	}
	if len(resumed) == 0 {
		return map[string]any{}, nil // not paused: nothing to resume (Quartz returns silently)
	}
	return map[string]any{"state": resumed[0].to}, nil
}

// resumed is one trigger a resume moved out of PAUSED or PAUSED_BLOCKED.
type resumed struct {
	key      events.Key
	from, to string
	misfired bool
}

// resume resumes the paused triggers of group (every group for allGroupsPaused), or only the
// one named name, as Quartz's resumeTrigger does: PAUSED → WAITING and PAUSED_BLOCKED → BLOCKED, or BLOCKED if its
// non-concurrent job runs now; one whose next fire time passed more than the misfire threshold
// ago has its misfire instruction applied first (the fire times missed while paused).
func (a *applyCtx) resume(ctx context.Context, group string, name *string) ([]resumed, error) {
	ns := a.h.cfg.Namespace
	rows, err := a.tx.Query(ctx, queries.Get("Resumable"), ns, group, name, a.now.Add(-a.h.cfg.MisfireThreshold), allGroupsPaused)
	if err != nil {
		return nil, fmt.Errorf("reading paused triggers: %w", err)
	}
	type paused struct {
		m        store.TriggerTimes
		to       string
		misfired bool
	}
	ps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (paused, error) {
		var p paused
		err := row.Scan(&p.m.Key.Group, &p.m.Key.Name, &p.m.State, &p.m.Schedule, &p.m.Next, &p.m.Prev, &p.m.Times,
			&p.m.Calendar, &p.to, &p.misfired)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading paused triggers: %w", err)
	}
	var names []string
	var g, n, from, to []string
	for _, p := range ps {
		if p.misfired {
			names = append(names, p.m.Calendar)
		} else {
			g, n, from, to = append(g, p.m.Key.Group), append(n, p.m.Key.Name), append(from, p.m.State), append(to, p.to)
		}
	}
	if len(g) > 0 {
		if _, err := a.tx.Exec(ctx, queries.Get("SetTriggerStates"), ns, g, n, from, to); err != nil {
			return nil, fmt.Errorf("resuming triggers: %w", err)
		}
	}
	cals, err := store.LoadCalendars(ctx, a.tx, ns, names)
	if err != nil {
		return nil, err
	}
	origin := events.Origin{Namespace: ns, InstanceID: a.h.cfg.InstanceID}
	out := make([]resumed, len(ps))
	for i, p := range ps {
		out[i] = resumed{key: p.m.Key, from: p.m.State, to: p.to, misfired: p.misfired}
		if p.misfired {
			evs, done, err := store.ApplyMisfire(ctx, a.tx, origin, p.m, cals, a.now, p.to)
			if err != nil {
				return nil, err
			}
			if done.State != "" {
				out[i].to = done.State // ERROR, or COMPLETE when no fire time is left
			}
			for _, ev := range evs {
				ev.TraceParent = a.traceParent
				a.tx.Append(ev)
			}
		}
		// One event per trigger, for resume_group and resume_all too: replay sets each state.
		// A misfired one's TriggerMisfired came first and carries its new times.
		r := out[i]
		if err := a.event(events.TypeTriggerResumed, events.AggregateTrigger, r.key.String(), "trigger",
			map[string]any{"trigger": r.key, "from": r.from, "state": r.to, "misfired": r.misfired, "commandId": a.commandID}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (a *applyCtx) pauseGroup(ctx context.Context, c *GroupRef) (any, error) {
	return a.pauseGroups(ctx, c.Group)
}

func (a *applyCtx) pauseAll(ctx context.Context, _ *All) (any, error) {
	return a.pauseGroups(ctx, allGroupsPaused)
}

// pauseGroups pauses a group, or every group (allGroupsPaused), as Quartz's pauseTriggerGroup
// and pauseAll: the group is recorded as paused, so triggers added to it later start PAUSED,
// and its triggers go WAITING/ACQUIRED → PAUSED, BLOCKED → PAUSED_BLOCKED. A claim made ahead
// on a trigger paused now is dropped by the fire step (its trigger changed).
func (a *applyCtx) pauseGroups(ctx context.Context, group string) (any, error) {
	var n int
	if err := a.tx.QueryRow(ctx, queries.Get("PauseGroup"), a.h.cfg.Namespace, group, allGroupsPaused).Scan(&n); err != nil {
		return nil, fmt.Errorf("pausing trigger group: %w", err)
	}
	return map[string]any{"paused": n}, a.groupEvent(events.TypeGroupPaused, group, n, 0)
}

func (a *applyCtx) resumeGroup(ctx context.Context, c *GroupRef) (any, error) {
	return a.resumeGroups(ctx, c.Group)
}

func (a *applyCtx) resumeAll(ctx context.Context, _ *All) (any, error) {
	return a.resumeGroups(ctx, allGroupsPaused)
}

// resumeGroups resumes a group, or every group (allGroupsPaused), as Quartz's
// resumeTriggerGroup and resumeAll: the group is no longer recorded as paused (resume_all:
// every group that has triggers, and the pause_all marker) and each of its paused triggers is
// resumed as by resume_trigger.
func (a *applyCtx) resumeGroups(ctx context.Context, group string) (any, error) {
	if _, err := a.tx.Exec(ctx, queries.Get("UnpauseGroup"), a.h.cfg.Namespace, group, allGroupsPaused); err != nil {
		return nil, fmt.Errorf("resuming trigger group: %w", err)
	}
	rs, err := a.resume(ctx, group, nil)
	if err != nil {
		return nil, err
	}
	misfired := 0
	for _, r := range rs {
		if r.misfired {
			misfired++
		}
	}
	return map[string]any{"resumed": len(rs), "misfired": misfired}, a.groupEvent(events.TypeGroupResumed, group, len(rs), misfired)
}

func (a *applyCtx) groupEvent(typ, group string, triggers, misfired int) error {
	data := map[string]any{"triggers": triggers, "commandId": a.commandID}
	id := group
	if group == allGroupsPaused {
		data["all"], id = true, "*"
	} else {
		data["group"] = group
	}
	if typ == events.TypeGroupResumed {
		data["misfired"] = misfired
	}
	return a.event(typ, events.AggregateGroup, id, "group", data)
}

func (a *applyCtx) triggerJob(ctx context.Context, c *TriggerJob) (any, error) {
	job, err := a.loadJob(ctx, c.Job, "job")
	if err != nil {
		return nil, err
	}
	now := a.now
	ts := TriggerSpec{Group: manualGroup, Name: "MT_" + strings.ReplaceAll(uuid.NewString(), "-", ""), Data: c.Data,
		Definition: trigger.Definition{StartAt: &now, Simple: &trigger.SimpleSchedule{}}}
	t, err := trigger.New(ts.Definition, now, nil)
	if err != nil {
		return nil, fmt.Errorf("building the trigger of trigger_job: %w", err)
	}
	st, err := a.storeTrigger(ctx, job, ts, "job", t, false)
	if err != nil {
		return nil, err
	}
	return map[string]any{"trigger": st}, nil
}

// InterruptJob is the interrupt_job command: cancel the runs in progress of a job, or of one fire.
type InterruptJob struct {
	ID     string    `json:"id"`
	Job    *KeyRef   `json:"job,omitempty"`
	FireID uuid.UUID `json:"fireId,omitzero"`
}

// interruptJob asks the workers, through a JobInterruptRequested event, to cancel the runs in
// progress (Quartz's interrupt): a worker running one cancels its handler's context, and the run
// ends as a final JobFailed with interrupted: true, unless the handler finishes anyway. Runs that
// start after the request are not interrupted. The result says how many executions were in
// flight; none is not an error (Quartz's interrupt returns false).
func (a *applyCtx) interruptJob(ctx context.Context, c *InterruptJob) (any, error) {
	ns := a.h.cfg.Namespace
	var job events.Key
	var executing int
	if c.Job != nil {
		if _, err := a.loadJob(ctx, *c.Job, "job"); err != nil {
			return nil, err
		}
		job = events.Key{Group: c.Job.Group, Name: c.Job.Name}
		if err := a.tx.QueryRow(ctx, queries.Get("JobExecutions"), ns, job.Group, job.Name).Scan(&executing); err != nil {
			return nil, fmt.Errorf("reading the job's executions: %w", err)
		}
	} else {
		err := a.tx.QueryRow(ctx, queries.Get("FireExecuting"), ns, c.FireID).Scan(&job.Group, &job.Name)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, reject(&Error{Code: CodeNotFound, Field: "fireId",
				Message: fmt.Sprintf("fire %s is not executing (it ended, or never was)", c.FireID)})
		}
		if err != nil {
			return nil, fmt.Errorf("reading the fire: %w", err)
		}
		executing = 1
	}
	return map[string]any{"executing": executing}, a.event(events.TypeJobInterruptRequested, events.AggregateJob, job.String(), "interrupt",
		events.InterruptRequest{Job: job, FireID: c.FireID, Executing: executing, CommandID: a.commandID})
}
