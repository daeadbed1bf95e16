package trigger

import (
	"encoding/json"
	"time"
)

// Daily-time-interval triggers (Quartz DailyTimeIntervalTriggerImpl): every n seconds, minutes
// or hours from startTimeOfDay to endTimeOfDay (inclusive) on the chosen days of the week, in
// the trigger's zone (Quartz uses the JVM's default zone; here it is the schedule's timeZone).
//
// Deliberate difference: Quartz can return a fire time after the trigger's end time (it checks
// the end time only before adding the interval); here no fire time is after the end time.

type dailyTime struct {
	start, end TimeOfDay
	days       [8]bool // index 1 = Sunday … 7 = Saturday
	interval   int64
	unit       unit
}

// UnmarshalJSON defaults repeatCount to -1 (no limit) when it is absent, as Quartz's builder does.
func (s *DailyTimeIntervalSchedule) UnmarshalJSON(b []byte) error {
	type plain DailyTimeIntervalSchedule
	p := plain{RepeatCount: repeatIndefinitely}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = DailyTimeIntervalSchedule(p)
	return nil
}

func compileDailyTimeInterval(s *DailyTimeIntervalSchedule, c *compiled) error {
	d := &dailyTime{interval: int64(s.Interval)}
	u, ok := parseUnit(s.Unit)
	if !ok || u > unitHour {
		return fieldErr("dailyTimeInterval.unit", "unknown unit %q; use second, minute or hour", s.Unit)
	}
	d.unit = u
	limit := map[unit]int{unitSecond: 86400, unitMinute: 1440, unitHour: 24}[u]
	if s.Interval < 1 || s.Interval > limit {
		return fieldErr("dailyTimeInterval.interval", "must be between 1 and %d %ss (24 hours), not %d", limit, toLowerASCII(s.Unit), s.Interval)
	}
	var err error
	d.start = TimeOfDay{}
	if s.StartTimeOfDay != "" {
		if d.start, err = parseWholeSecondTimeOfDay(s.StartTimeOfDay); err != nil {
			return fieldErr("dailyTimeInterval.startTimeOfDay", "%v", err)
		}
	}
	d.end = TimeOfDay{Hour: 23, Minute: 59, Second: 59}
	if s.EndTimeOfDay != "" {
		if d.end, err = parseWholeSecondTimeOfDay(s.EndTimeOfDay); err != nil {
			return fieldErr("dailyTimeInterval.endTimeOfDay", "%v", err)
		}
	}
	if d.end.millis() < d.start.millis() {
		return fieldErr("dailyTimeInterval.endTimeOfDay", "end of day %s is before start of day %s", d.end, d.start)
	}
	if s.RepeatCount < -1 {
		return fieldErr("dailyTimeInterval.repeatCount", "must be -1 (no limit) or at least 0, not %d", s.RepeatCount)
	}
	if len(s.DaysOfWeek) == 0 {
		for i := 1; i <= 7; i++ {
			d.days[i] = true
		}
	}
	for i, v := range s.DaysOfWeek {
		if v < 1 || v > 7 {
			return fieldErr("dailyTimeInterval.daysOfWeek", "item %d: %d is not a day of week (1 = Sunday … 7 = Saturday, or SUN…SAT)", i, v)
		}
		d.days[v] = true
	}
	loc, err := loadZone(s.TimeZone)
	if err != nil {
		return fieldErr("dailyTimeInterval.timeZone", "%v", err)
	}
	c.dti, c.loc = d, loc
	return nil
}

func parseWholeSecondTimeOfDay(s string) (TimeOfDay, error) {
	d, err := parseTimeOfDay(s)
	if err != nil {
		return d, err
	}
	if d.Millisecond != 0 {
		return d, errFmt("%q: times of day are whole seconds (HH:MM:SS)", s)
	}
	return d, nil
}

// timeOfDayFor is Quartz TimeOfDay.getTimeOfDayForDate: tod on t's local day.
func timeOfDayFor(loc *time.Location, t time.Time, tod TimeOfDay) time.Time {
	c := newJcal(loc, t)
	c.setHour(tod.Hour)
	c.setMinute(tod.Minute)
	c.setSecond(tod.Second)
	c.setMilli(0)
	return c.time()
}

func sameLocalDay(loc *time.Location, a, b time.Time) bool {
	ya, ma, da, _ := localDate(a, loc)
	yb, mb, db, _ := localDate(b, loc)
	return ya == yb && ma == mb && da == db
}

func (t *Trigger) dailyFirstFireTime(c *compiled) time.Time {
	return t.dailyFireTimeAfter(c, t.start().Add(-time.Second))
}

func (t *Trigger) dailyFireTimeAfter(c *compiled, after time.Time) time.Time {
	ft := t.dailyFireTimeAfterQuartz(c, after)
	if ft.IsZero() {
		return ft
	}
	if e, ok := t.end(); ok && ft.After(e) {
		return time.Time{}
	}
	if !ft.After(after) { // defensive: only reachable through zone oddities
		return time.Time{}
	}
	return ft.UTC()
}

func (t *Trigger) dailyFireTimeAfterQuartz(c *compiled, after time.Time) time.Time {
	d, loc := c.dti, c.loc
	rc := t.DailyTimeInterval.RepeatCount
	if rc != repeatIndefinitely && t.TimesTriggered > rc {
		return time.Time{}
	}
	after = time.UnixMilli(after.UnixMilli() + 1000)
	if start := t.start(); after.Before(start) {
		after = start
	}
	pastEnd := after.After(timeOfDayFor(loc, after, d.end))
	fireTime := t.dailyAdvance(c, after, pastEnd)
	if fireTime.IsZero() {
		return fireTime
	}
	fireEnd := timeOfDayFor(loc, fireTime, d.end)
	fireStart := timeOfDayFor(loc, fireTime, d.start)
	if fireTime.Before(fireStart) {
		return fireStart
	}
	secondsAfterStart := (fireTime.UnixMilli() - fireStart.UnixMilli()) / 1000
	s := newJcal(loc, fireStart)
	per := map[unit]int64{unitSecond: 1, unitMinute: 60, unitHour: 3600}[d.unit]
	j := secondsAfterStart / (d.interval * per)
	if secondsAfterStart%(d.interval*per) != 0 {
		j++
	}
	s.addMillis(javaInt(d.interval*javaInt(j)) * per * 1000)
	fireTime = s.time()
	if fireTime.After(fireEnd) {
		fireTime = t.dailyAdvance(c, fireTime, sameLocalDay(loc, fireTime, fireEnd))
		if fireTime.IsZero() {
			return fireTime
		}
		fireTime = timeOfDayFor(loc, fireTime, d.start)
	}
	return fireTime
}

// dailyAdvance is Quartz's advanceToNextDayOfWeekIfNecessary.
func (t *Trigger) dailyAdvance(c *compiled, fireTime time.Time, force bool) time.Time {
	d, loc := c.dti, c.loc
	cal := newJcal(loc, timeOfDayFor(loc, fireTime, d.start))
	if force || !d.days[cal.getDayOfWeek()] {
		for range 7 {
			cal.addDays(1)
			if d.days[cal.getDayOfWeek()] {
				fireTime = cal.time()
				break
			}
		}
	}
	if e, ok := t.end(); ok && fireTime.After(e) {
		return time.Time{}
	}
	return fireTime
}

func (t *Trigger) dailyFinalFireTime(c *compiled) time.Time {
	e, ok := t.end()
	if !ok {
		return time.Time{}
	}
	if eod := timeOfDayFor(c.loc, e, c.dti.end); e.Before(eod) {
		e = eod
	}
	return e.UTC()
}
