package trigger

import (
	"math"
	"time"
)

// Calendar-interval triggers (Quartz CalendarIntervalTriggerImpl): start, then every n units of
// calendar time in the trigger's zone. Days, weeks, months and years are counted on the local
// calendar, so "every 1 day" keeps the local time of day across DST changes where it can.

type unit int

const (
	unitSecond unit = iota + 1
	unitMinute
	unitHour
	unitDay
	unitWeek
	unitMonth
	unitYear
)

var unitNames = map[string]unit{
	"second": unitSecond, "minute": unitMinute, "hour": unitHour, "day": unitDay,
	"week": unitWeek, "month": unitMonth, "year": unitYear,
}

func parseUnit(s string) (unit, bool) {
	u, ok := unitNames[toLowerASCII(s)]
	if !ok && len(s) > 1 && (s[len(s)-1] == 's' || s[len(s)-1] == 'S') {
		u, ok = unitNames[toLowerASCII(s[:len(s)-1])]
	}
	return u, ok
}

func toLowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 32
		}
	}
	return string(b)
}

func compileCalendarInterval(s *CalendarIntervalSchedule, c *compiled) error {
	u, ok := parseUnit(s.Unit)
	if !ok {
		return fieldErr("calendarInterval.unit", "unknown unit %q; use second, minute, hour, day, week, month or year", s.Unit)
	}
	if s.Interval < 1 || s.Interval > math.MaxInt32 {
		return fieldErr("calendarInterval.interval", "must be a positive number of %ss, not %d", toLowerASCII(s.Unit), s.Interval)
	}
	loc, err := loadZone(s.TimeZone)
	if err != nil {
		return fieldErr("calendarInterval.timeZone", "%v", err)
	}
	if s.SkipDayIfHourDoesNotExist && !s.PreserveHourOfDayAcrossDaylightSavings {
		return fieldErr("calendarInterval.skipDayIfHourDoesNotExist", "only applies with preserveHourOfDayAcrossDaylightSavings")
	}
	c.ci, c.unit, c.loc = s, u, loc
	return nil
}

// javaInt is Java's (int) narrowing of a long: the low 32 bits.
func javaInt(v int64) int64 { return int64(int32(v)) }

func (t *Trigger) calendarIntervalFireTimeAfter(c *compiled, after time.Time, ignoreEnd bool) time.Time {
	start := t.start()
	startMs, afterMs := start.UnixMilli(), after.UnixMilli()
	endMs := int64(math.MaxInt64)
	if e, ok := t.end(); ok {
		endMs = e.UnixMilli()
	}
	if !ignoreEnd && endMs <= afterMs {
		return time.Time{}
	}
	if afterMs < startMs {
		return time.UnixMilli(startMs).UTC()
	}
	secondsAfterStart := 1 + (afterMs-startMs)/1000
	iv := int64(c.ci.Interval)
	s := newJcal(c.loc, start)
	jumpBy := func(per int64) int64 {
		j := secondsAfterStart / per
		if secondsAfterStart%per != 0 {
			j++
		}
		return j
	}
	bigLeap := func(j int64) int64 {
		switch {
		case j <= 20:
			return 0
		case j < 50:
			return int64(float64(j) * 0.80)
		case j < 500:
			return int64(float64(j) * 0.90)
		default:
			return int64(float64(j) * 0.95)
		}
	}
	notAfter := func() bool { return !s.time().After(after) && s.getYear() < maxYear }
	switch c.unit {
	case unitSecond:
		s.addMillis(javaInt(iv*javaInt(jumpBy(iv))) * 1000)
	case unitMinute:
		s.addMillis(javaInt(iv*javaInt(jumpBy(iv*60))) * 60000)
	case unitHour:
		s.addMillis(javaInt(iv*javaInt(jumpBy(iv*3600))) * 3600000)
	default:
		initialHour := s.getHour()
		var step func(n int64)
		switch c.unit {
		case unitDay:
			step = func(n int64) { s.addDays(javaInt(n)) }
			if j := bigLeap(secondsAfterStart / (iv * 86400)); j > 0 {
				step(iv * j)
			}
		case unitWeek:
			step = func(n int64) { s.addDays(javaInt(n) * 7) }
			if j := bigLeap(secondsAfterStart / (iv * 7 * 86400)); j > 0 {
				step(iv * j)
			}
		case unitMonth:
			step = func(n int64) { s.addMonths(int(javaInt(n))) }
		case unitYear:
			step = func(n int64) { s.addYears(int(javaInt(n))) }
		}
		for notAfter() {
			step(iv)
		}
		for t.dstShiftNeedsAdvance(c, s, initialHour, after) && s.getYear() < maxYear {
			step(iv)
		}
	}
	ft := s.time()
	if !ignoreEnd && endMs <= ft.UnixMilli() {
		return time.Time{}
	}
	if !ignoreEnd && !ft.After(after) {
		return time.Time{} // only past Quartz's give-up year, where Quartz returns a stale time
	}
	return ft.UTC()
}

// dstShiftNeedsAdvance is Quartz's daylightSavingHourShiftOccurredAndAdvanceNeeded, including its
// side effect of moving s back to the initial hour of day.
func (t *Trigger) dstShiftNeedsAdvance(c *compiled, s *jcal, initialHour int, after time.Time) bool {
	if c.ci.PreserveHourOfDayAcrossDaylightSavings && s.getHour() != initialHour {
		s.setHour(initialHour)
		if s.getHour() != initialHour {
			return c.ci.SkipDayIfHourDoesNotExist
		}
		return !s.time().After(after)
	}
	return false
}

func (t *Trigger) calendarIntervalFinalFireTime(c *compiled) time.Time {
	end, ok := t.end()
	if !ok {
		return time.Time{}
	}
	f := t.calendarIntervalFireTimeAfter(c, end.Add(-time.Second), true)
	if f.IsZero() || f.Equal(end) {
		return f
	}
	l := newJcal(c.loc, f)
	iv := int64(c.ci.Interval)
	switch c.unit {
	case unitSecond:
		l.addMillis(-iv * 1000)
	case unitMinute:
		l.addMillis(-iv * 60000)
	case unitHour:
		l.addMillis(-iv * 3600000)
	case unitDay:
		l.addDays(-iv)
	case unitWeek:
		l.addDays(-iv * 7)
	case unitMonth:
		l.addMonths(-int(iv))
	case unitYear:
		l.addYears(-int(iv))
	}
	return l.time().UTC()
}
