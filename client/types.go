package client

import (
	"encoding/json"
	"time"
)

// Key names a job or a trigger: its group and name.
type Key struct {
	Group string `json:"group"`
	Name  string `json:"name"`
}

func (k Key) String() string { return k.Group + "." + k.Name }

// Job is a job as schedule_job and add_job describe it (docs/contract.md, "schedule_job").
type Job struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	// Type is the job type; workers run the types they registered.
	Type string `json:"type"`
	// Data is given to every run, merged with the firing trigger's data (the trigger wins).
	Data map[string]any `json:"data,omitempty"`
	// Nonconcurrent: its triggers wait while one of its runs is in flight (Quartz's
	// @DisallowConcurrentExecution).
	Nonconcurrent bool `json:"nonconcurrent,omitempty"`
	// RequestsRecovery: a run that can no longer finish is fired again once (recovering: true).
	RequestsRecovery bool `json:"requestsRecovery,omitempty"`
	// Durable: the job stays when it has no trigger left.
	Durable bool `json:"durable,omitempty"`
	// Timeout bounds one run ("30s", "5m", "PT5M"); the worker's default applies without it.
	Timeout     string `json:"timeout,omitempty"`
	Description string `json:"description,omitempty"`
	// PersistData: the data a completed run hands back replaces the job's (Quartz's
	// @PersistJobDataAfterExecution).
	PersistData bool `json:"persistData,omitempty"`
}

// Trigger is a trigger with exactly one schedule: Cron, Simple, CalendarInterval or
// DailyTimeInterval (docs/contract.md, "Triggers").
type Trigger struct {
	Group             string                    `json:"group"`
	Name              string                    `json:"name"`
	Cron              *CronSchedule             `json:"cron,omitempty"`
	Simple            *SimpleSchedule           `json:"simple,omitempty"`
	CalendarInterval  *CalendarIntervalSchedule `json:"calendarInterval,omitempty"`
	DailyTimeInterval *DailyTimeSchedule        `json:"dailyTimeInterval,omitempty"`
	// Misfire is a Quartz misfire instruction in snake_case ("fire_once_now", "do_nothing", …);
	// empty means smart_policy.
	Misfire  string         `json:"misfire,omitempty"`
	Priority *int           `json:"priority,omitempty"`
	StartAt  *time.Time     `json:"startAt,omitempty"`
	EndAt    *time.Time     `json:"endAt,omitempty"`
	Calendar string         `json:"calendar,omitempty"`
	Data     map[string]any `json:"data,omitempty"`
}

// CronSchedule fires at the times a Quartz cron expression selects, in TimeZone (UTC when empty).
type CronSchedule struct {
	Expression string `json:"expression"`
	TimeZone   string `json:"timeZone,omitempty"`
}

// SimpleSchedule fires RepeatCount+1 times Interval apart (RepeatCount -1: forever); a one-shot
// has RepeatCount 0 and no Interval.
type SimpleSchedule struct {
	Interval    string `json:"interval,omitempty"`
	RepeatCount int    `json:"repeatCount"`
}

// CalendarIntervalSchedule fires every Interval Units of calendar time.
type CalendarIntervalSchedule struct {
	Interval                               int    `json:"interval"`
	Unit                                   string `json:"unit"`
	TimeZone                               string `json:"timeZone,omitempty"`
	PreserveHourOfDayAcrossDaylightSavings bool   `json:"preserveHourOfDayAcrossDaylightSavings,omitempty"`
	SkipDayIfHourDoesNotExist              bool   `json:"skipDayIfHourDoesNotExist,omitempty"`
}

// DailyTimeSchedule fires every Interval Units between two times of day on some days.
type DailyTimeSchedule struct {
	StartTimeOfDay string   `json:"startTimeOfDay,omitempty"`
	EndTimeOfDay   string   `json:"endTimeOfDay,omitempty"`
	DaysOfWeek     []string `json:"daysOfWeek,omitempty"`
	Interval       int      `json:"interval"`
	Unit           string   `json:"unit"`
	RepeatCount    *int     `json:"repeatCount,omitempty"`
	TimeZone       string   `json:"timeZone,omitempty"`
}

// OneShot is a trigger that fires once, at at.
func OneShot(group, name string, at time.Time) Trigger {
	return Trigger{Group: group, Name: name, StartAt: &at, Simple: &SimpleSchedule{RepeatCount: 0}}
}

// Cron is a trigger firing on a Quartz cron expression in a time zone ("" for UTC).
func Cron(group, name, expression, timeZone string) Trigger {
	return Trigger{Group: group, Name: name, Cron: &CronSchedule{Expression: expression, TimeZone: timeZone}}
}

// Every is a trigger firing every interval, forever, from now (or StartAt, when set).
func Every(group, name string, interval time.Duration) Trigger {
	return Trigger{Group: group, Name: name, Simple: &SimpleSchedule{Interval: interval.String(), RepeatCount: -1}}
}

// ScheduledTrigger is a trigger an accepted command stored, with its first (next) fire time;
// NextFireTime is nil when it will not fire.
type ScheduledTrigger struct {
	Group        string     `json:"group"`
	Name         string     `json:"name"`
	NextFireTime *time.Time `json:"nextFireTime"`
}

// Outcome is a command's answer (docs/contract.md, "Outcomes and error codes").
type Outcome struct {
	OK        bool            `json:"ok"`
	CommandID string          `json:"commandId,omitempty"`
	Command   string          `json:"command,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *Error          `json:"error,omitempty"`
}
