package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// The queries of docs/contract.md ("Queries"). They change nothing; a missing job, trigger or
// calendar is an *Error matching ErrNotFound. A list answers a page: pass its NextCursor as the
// next request's Cursor for the following one ("" when there is no more).

// Page selects a page of a list: Cursor from the previous page ("" for the first), Limit items
// (0: the scheduler's default).
type Page struct {
	Cursor string `json:"cursor,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// JobInfo is a job as the scheduler stores it; Triggers only from GetJob, Data only from GetJob.
type JobInfo struct {
	Group            string           `json:"group"`
	Name             string           `json:"name"`
	Type             string           `json:"type"`
	Description      string           `json:"description,omitempty"`
	Durable          bool             `json:"durable"`
	Nonconcurrent    bool             `json:"nonconcurrent"`
	RequestsRecovery bool             `json:"requestsRecovery"`
	PersistData      bool             `json:"persistData"`
	Timeout          string           `json:"timeout,omitempty"`
	Version          int64            `json:"version"`
	Data             json.RawMessage  `json:"data,omitempty"`
	Triggers         []TriggerSummary `json:"triggers,omitempty"`
}

// TriggerSummary is one trigger of a job, in GetJob.
type TriggerSummary struct {
	Group        string     `json:"group"`
	Name         string     `json:"name"`
	State        string     `json:"state"`
	NextFireTime *time.Time `json:"nextFireTime,omitempty"`
}

// TriggerInfo is a trigger as the scheduler stores it, with its state.
type TriggerInfo struct {
	Trigger
	Job              JobRef     `json:"job"`
	State            string     `json:"state"`
	NextFireTime     *time.Time `json:"nextFireTime,omitempty"`
	PreviousFireTime *time.Time `json:"previousFireTime,omitempty"`
	TimesTriggered   int        `json:"timesTriggered"`
	Version          int64      `json:"version"`
}

// JobFilter narrows ListJobs.
type JobFilter struct {
	Group string `json:"group,omitempty"`
	Type  string `json:"type,omitempty"`
	Page
}

// TriggerFilter narrows ListTriggers.
type TriggerFilter struct {
	Group   string `json:"group,omitempty"`
	State   string `json:"state,omitempty"`
	Job     *Key   `json:"job,omitempty"`
	JobType string `json:"jobType,omitempty"`
	Page
}

// JobRef names a job and its type.
type JobRef struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	Type  string `json:"type"`
}

// Execution is a fire in flight.
type Execution struct {
	FireID        string    `json:"fireId"`
	Job           JobRef    `json:"job"`
	Trigger       Key       `json:"trigger"`
	Instance      string    `json:"instance"`
	ScheduledTime time.Time `json:"scheduledTime"`
	FiredTime     time.Time `json:"firedTime"`
	Recovering    bool      `json:"recovering"`
}

// CalendarInfo is a stored calendar; Triggers (how many use it) only from GetCalendar.
type CalendarInfo struct {
	Name     string          `json:"name"`
	Calendar json.RawMessage `json:"calendar"`
	Version  int64           `json:"version"`
	Triggers *int            `json:"triggers,omitempty"`
}

// Instance is a scheduler node and its last check-in.
type Instance struct {
	InstanceID      string    `json:"instanceId"`
	LastCheckin     time.Time `json:"lastCheckin"`
	SinceCheckin    string    `json:"sinceCheckin"`
	CheckinInterval string    `json:"checkinInterval"`
}

// WorkerType is what JetStream knows of the workers of one job type (they share one consumer,
// so they are counted together).
type WorkerType struct {
	JobType string `json:"jobType"`
	// Waiting is how many pull requests wait for fires: workers asking for work now.
	Waiting int `json:"waiting"`
	// InFlight is how many runs are in progress (delivered, not acknowledged).
	InFlight int `json:"inFlight"`
	// Pending is how many fires wait in the stream, not delivered yet.
	Pending uint64 `json:"pending"`
	// LastDelivered is when a worker of the type last received a fire (nil: never).
	LastDelivered *time.Time `json:"lastDelivered,omitempty"`
}

// Worker is a worker process as the schedulers heard it announce itself.
type Worker struct {
	Instance    string    `json:"instance"`
	JobTypes    []string  `json:"jobTypes"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"inFlight"`
	Started     time.Time `json:"started"`
	Interval    string    `json:"interval"`
	// LastSeen and SinceSeen: when the answering scheduler last heard from it, and how long ago.
	LastSeen  time.Time `json:"lastSeen"`
	SinceSeen string    `json:"sinceSeen"`
}

// Workers returns the worker processes heard from lately, and the workers of each job type as
// JetStream sees them.
func (c *Client) Workers(ctx context.Context) ([]Worker, []WorkerType, error) {
	var res struct {
		Workers  []Worker     `json:"workers"`
		JobTypes []WorkerType `json:"jobTypes"`
	}
	err := c.Query(ctx, "workers", map[string]any{}, &res)
	return res.Workers, res.JobTypes, err
}

// GetJob returns a job with its triggers.
func (c *Client) GetJob(ctx context.Context, job Key) (JobInfo, error) {
	var j JobInfo
	err := c.Query(ctx, "get_job", map[string]any{"job": job}, &j)
	return j, err
}

// ListJobs returns a page of jobs in key order, and the cursor of the next page.
func (c *Client) ListJobs(ctx context.Context, f JobFilter) ([]JobInfo, string, error) {
	var res struct {
		Jobs       []JobInfo `json:"jobs"`
		NextCursor string    `json:"nextCursor"`
	}
	err := c.Query(ctx, "list_jobs", f, &res)
	return res.Jobs, res.NextCursor, err
}

// GetTrigger returns a trigger with its state.
func (c *Client) GetTrigger(ctx context.Context, t Key) (TriggerInfo, error) {
	var ti TriggerInfo
	err := c.Query(ctx, "get_trigger", map[string]any{"trigger": t}, &ti)
	return ti, err
}

// ListTriggers returns a page of triggers in key order, and the cursor of the next page.
func (c *Client) ListTriggers(ctx context.Context, f TriggerFilter) ([]TriggerInfo, string, error) {
	var res struct {
		Triggers   []TriggerInfo `json:"triggers"`
		NextCursor string        `json:"nextCursor"`
	}
	err := c.Query(ctx, "list_triggers", f, &res)
	return res.Triggers, res.NextCursor, err
}

// NextFireTimes returns up to n (0: 10) next fire times of a trigger, its calendar applied.
func (c *Client) NextFireTimes(ctx context.Context, t Key, n int) ([]time.Time, error) {
	body := map[string]any{"trigger": t}
	if n > 0 {
		body["count"] = n
	}
	var res struct {
		FireTimes []time.Time `json:"fireTimes"`
	}
	err := c.Query(ctx, "next_fire_times", body, &res)
	return res.FireTimes, err
}

// Explanation is explain's answer: why a trigger fired or did not (docs/contract.md, "explain").
type Explanation struct {
	Trigger      Key        `json:"trigger"`
	At           *time.Time `json:"at,omitempty"`
	State        string     `json:"state,omitempty"` // empty when the trigger no longer exists
	NextFireTime *time.Time `json:"nextFireTime,omitempty"`
	Job          *JobRef    `json:"job,omitempty"`
	// Summary is one sentence to read first; Reasons are the findings, most telling first.
	Summary string   `json:"summary"`
	Reasons []Reason `json:"reasons"`
}

// Reason is one finding of explain: a code of the contract ("paused", "blocked",
// "calendar_excluded", "misfired", "no_worker", …), a message for people, and what it refers to.
type Reason struct {
	Code     string     `json:"code"`
	Message  string     `json:"message"`
	Time     *time.Time `json:"time,omitempty"`
	EventID  string     `json:"eventId,omitempty"`
	FireID   string     `json:"fireId,omitempty"`
	Instance string     `json:"instance,omitempty"`
	Calendar string     `json:"calendar,omitempty"`
}

// Explain says why trigger t fired or did not: at a time someone expected a fire (at), or now
// (at nil): its state, what keeps it from firing, and its latest fire's outcome.
func (c *Client) Explain(ctx context.Context, t Key, at *time.Time) (Explanation, error) {
	body := map[string]any{"trigger": t}
	if at != nil {
		body["at"] = at.UTC()
	}
	var res Explanation
	err := c.Query(ctx, "explain", body, &res)
	return res, err
}

// History returns a page of the logged events of a job or (trigger true) of a trigger, newest
// first, and the cursor of the next page.
func (c *Client) History(ctx context.Context, k Key, trigger bool, p Page) ([]Event, string, error) {
	body := map[string]any{"job": k}
	if trigger {
		body = map[string]any{"trigger": k}
	}
	if p.Cursor != "" {
		body["cursor"] = p.Cursor
	}
	if p.Limit > 0 {
		body["limit"] = p.Limit
	}
	var res struct {
		Events     []Event `json:"events"`
		NextCursor string  `json:"nextCursor"`
	}
	err := c.Query(ctx, "history", body, &res)
	return res.Events, res.NextCursor, err
}

// Executing returns the fires in flight, of one job when job is not nil.
func (c *Client) Executing(ctx context.Context, job *Key) ([]Execution, error) {
	body := map[string]any{}
	if job != nil {
		body["job"] = job
	}
	var res struct {
		Executions []Execution `json:"executions"`
	}
	err := c.Query(ctx, "executing", body, &res)
	return res.Executions, err
}

// ListCalendars returns a page of calendars and the cursor of the next page.
func (c *Client) ListCalendars(ctx context.Context, p Page) ([]CalendarInfo, string, error) {
	var res struct {
		Calendars  []CalendarInfo `json:"calendars"`
		NextCursor string         `json:"nextCursor"`
	}
	err := c.Query(ctx, "list_calendars", p, &res)
	return res.Calendars, res.NextCursor, err
}

// Instances returns the scheduler nodes of the namespace and their last check-in.
func (c *Client) Instances(ctx context.Context) ([]Instance, error) {
	var res struct {
		Instances []Instance `json:"instances"`
	}
	err := c.Query(ctx, "instances", map[string]any{}, &res)
	return res.Instances, err
}

// Query sends a query by name with body and decodes its result into result; a rejection is an
// *Error.
func (c *Client) Query(ctx context.Context, name string, body, result any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding the %s query: %w", name, err)
	}
	var reply struct {
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if err := c.do(ctx, name, data, &reply); err != nil {
		return err
	}
	if reply.Error != nil {
		return reply.Error
	}
	if !reply.OK {
		return fmt.Errorf("%s: the scheduler answered neither ok nor an error", name)
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Result, result); err != nil {
		return fmt.Errorf("%s: reading the result: %w", name, err)
	}
	return nil
}
