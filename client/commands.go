package client

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/uuid"
)

// The commands of docs/contract.md. Each takes the command's body; ID may be left empty (one is
// generated) and ExpectedVersion nil (no check). A rejection is returned as an *Error, which
// errors.Is matches against ErrNotFound, ErrAlreadyExists and the other codes.

// ScheduleJob is the body of schedule_job: a job and its triggers.
type ScheduleJob struct {
	ID              string    `json:"id,omitempty"`
	Job             Job       `json:"job"`
	Triggers        []Trigger `json:"triggers,omitempty"`
	Replace         bool      `json:"replace,omitempty"`
	ExpectedVersion *int64    `json:"expectedVersion,omitempty"`
}

// ScheduleJob stores a job and its triggers and returns each trigger with its first fire time.
func (c *Client) ScheduleJob(ctx context.Context, cmd ScheduleJob) ([]ScheduledTrigger, error) {
	var res struct {
		Triggers []ScheduledTrigger `json:"triggers"`
	}
	err := c.run(ctx, "schedule_job", cmd, &res)
	return res.Triggers, err
}

// AddJob is the body of add_job: a durable job stored without triggers.
type AddJob struct {
	ID              string `json:"id,omitempty"`
	Job             Job    `json:"job"`
	Replace         bool   `json:"replace,omitempty"`
	ExpectedVersion *int64 `json:"expectedVersion,omitempty"`
}

// AddJob stores a durable job without triggers.
func (c *Client) AddJob(ctx context.Context, cmd AddJob) error {
	return c.run(ctx, "add_job", cmd, nil)
}

// DeleteJob deletes a job and its triggers.
func (c *Client) DeleteJob(ctx context.Context, job Key, expectedVersion *int64) error {
	return c.run(ctx, "delete_job", map[string]any{"job": job, "expectedVersion": expectedVersion}, nil)
}

// ScheduleTrigger adds a trigger to an existing job and returns it with its first fire time.
func (c *Client) ScheduleTrigger(ctx context.Context, job Key, t Trigger) (ScheduledTrigger, error) {
	return c.oneTrigger(ctx, "schedule_trigger", map[string]any{"job": job, "trigger": t})
}

// RescheduleTrigger replaces a trigger by another for the same job.
func (c *Client) RescheduleTrigger(ctx context.Context, old Key, t Trigger, expectedVersion *int64) (ScheduledTrigger, error) {
	return c.oneTrigger(ctx, "reschedule_trigger", map[string]any{"trigger": old, "newTrigger": t, "expectedVersion": expectedVersion})
}

// UnscheduleTrigger removes a trigger (and its job when it is left without triggers and is not
// durable).
func (c *Client) UnscheduleTrigger(ctx context.Context, t Key, expectedVersion *int64) error {
	return c.run(ctx, "unschedule_trigger", map[string]any{"trigger": t, "expectedVersion": expectedVersion}, nil)
}

// PauseTrigger pauses a trigger and returns its state after.
func (c *Client) PauseTrigger(ctx context.Context, t Key, expectedVersion *int64) (string, error) {
	return c.state(ctx, "pause_trigger", t, expectedVersion)
}

// ResumeTrigger resumes a paused trigger (its misfire instruction applies to fire times missed
// while paused) and returns its state after; "" when it was not paused.
func (c *Client) ResumeTrigger(ctx context.Context, t Key, expectedVersion *int64) (string, error) {
	return c.state(ctx, "resume_trigger", t, expectedVersion)
}

// PauseGroup pauses a trigger group, and the triggers added to it later; it returns how many
// triggers it paused.
func (c *Client) PauseGroup(ctx context.Context, group string) (int, error) {
	return c.count(ctx, "pause_group", map[string]any{"group": group}, "paused")
}

// ResumeGroup resumes a trigger group; it returns how many triggers it resumed.
func (c *Client) ResumeGroup(ctx context.Context, group string) (int, error) {
	return c.count(ctx, "resume_group", map[string]any{"group": group}, "resumed")
}

// PauseAll pauses every trigger group, and groups added later.
func (c *Client) PauseAll(ctx context.Context) (int, error) {
	return c.count(ctx, "pause_all", map[string]any{}, "paused")
}

// ResumeAll resumes every trigger group.
func (c *Client) ResumeAll(ctx context.Context) (int, error) {
	return c.count(ctx, "resume_all", map[string]any{}, "resumed")
}

// TriggerJob fires a job now, once, with extra data, and returns the one-shot trigger it added.
func (c *Client) TriggerJob(ctx context.Context, job Key, data map[string]any) (ScheduledTrigger, error) {
	return c.oneTrigger(ctx, "trigger_job", map[string]any{"job": job, "data": data})
}

// InterruptJob asks the workers to interrupt the runs in progress of a job; it returns how many
// executions were in flight.
func (c *Client) InterruptJob(ctx context.Context, job Key) (int, error) {
	return c.count(ctx, "interrupt_job", map[string]any{"job": job}, "executing")
}

// InterruptFire asks the worker running one fire to interrupt it.
func (c *Client) InterruptFire(ctx context.Context, fireID uuid.UUID) error {
	return c.run(ctx, "interrupt_job", map[string]any{"fireId": fireID}, nil)
}

// AddCalendar stores a calendar (docs/contract.md, "Calendars"); with replace, the triggers that
// use it get their next fire times recomputed.
func (c *Client) AddCalendar(ctx context.Context, name string, calendar json.RawMessage, replace bool) error {
	return c.run(ctx, "add_calendar", map[string]any{"name": name, "calendar": calendar, "replace": replace}, nil)
}

// DeleteCalendar deletes a calendar no trigger uses.
func (c *Client) DeleteCalendar(ctx context.Context, name string) error {
	return c.run(ctx, "delete_calendar", map[string]any{"name": name}, nil)
}

// run sends a command and decodes its result into res (when not nil).
func (c *Client) run(ctx context.Context, name string, body any, res any) error {
	if m, ok := body.(map[string]any); ok {
		for k, v := range m { // optional fields left out rather than sent as null
			if rv := reflect.ValueOf(v); v == nil || (rv.Kind() == reflect.Map || rv.Kind() == reflect.Pointer) && rv.IsNil() {
				delete(m, k)
			}
		}
	}
	out, err := c.Command(ctx, name, body)
	if err != nil || res == nil || len(out.Result) == 0 {
		return err
	}
	if err := json.Unmarshal(out.Result, res); err != nil {
		return fmt.Errorf("%s: reading the result: %w", name, err)
	}
	return nil
}

func (c *Client) oneTrigger(ctx context.Context, name string, body map[string]any) (ScheduledTrigger, error) {
	var res struct {
		Trigger ScheduledTrigger `json:"trigger"`
	}
	err := c.run(ctx, name, body, &res)
	return res.Trigger, err
}

func (c *Client) state(ctx context.Context, name string, t Key, expectedVersion *int64) (string, error) {
	var res struct {
		State string `json:"state"`
	}
	err := c.run(ctx, name, map[string]any{"trigger": t, "expectedVersion": expectedVersion}, &res)
	return res.State, err
}

func (c *Client) count(ctx context.Context, name string, body map[string]any, field string) (int, error) {
	var res map[string]int
	err := c.run(ctx, name, body, &res)
	return res[field], err
}
