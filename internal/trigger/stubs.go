package trigger

import (
	"time"
)

type unit int

type dailyTime struct{}

func compileCalendarInterval(s *CalendarIntervalSchedule, c *compiled) error {
	return fieldErr("calendarInterval", "calendarInterval triggers are not implemented yet")
}

func compileDailyTimeInterval(s *DailyTimeIntervalSchedule, c *compiled) error {
	return fieldErr("dailyTimeInterval", "dailyTimeInterval triggers are not implemented yet")
}

func (t *Trigger) calendarIntervalFireTimeAfter(c *compiled, after time.Time, ignoreEnd bool) time.Time {
	return time.Time{}
}
func (t *Trigger) calendarIntervalFinalFireTime(c *compiled) time.Time { return time.Time{} }
func (t *Trigger) dailyFireTimeAfter(c *compiled, after time.Time) time.Time {
	return time.Time{}
}
func (t *Trigger) dailyFirstFireTime(c *compiled) time.Time { return time.Time{} }
func (t *Trigger) dailyFinalFireTime(c *compiled) time.Time { return time.Time{} }
