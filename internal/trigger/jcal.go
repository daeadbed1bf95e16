package trigger

import "time"

// jcal reproduces the parts of java.util.GregorianCalendar (lenient mode) that Quartz's
// algorithms rely on. Quartz computes fire times by setting calendar fields to values that may
// be out of range (minute 60, day 32, month 12) and reading them back, and by letting the JDK
// resolve local times that do not exist (spring-forward gap) or exist twice (fall-back overlap).
// Matching Quartz to the second therefore means matching those rules, not just civil-time
// arithmetic:
//
//   - fields are stored as set and only normalised when read (Calendar.complete);
//   - a local time is turned into an instant with the offset of the last transition whose
//     local start (transition instant + new offset) is not after it, so a time inside a gap
//     uses the offset before the gap (02:30 in New York's gap becomes 03:30 EDT) and a time
//     inside an overlap uses the offset after it (the second, standard-time occurrence).
type jcal struct {
	loc *time.Location
	// year, month (0-based as in Java), day of month, hour of day, minute, second, millisecond.
	year, month, day, hour, min, sec, ms int
	dirty                                bool
	instant                              int64 // Unix milliseconds, valid when !dirty
}

func newJcal(loc *time.Location, t time.Time) *jcal {
	c := &jcal{loc: loc}
	c.setTime(t.UnixMilli())
	return c
}

// setTime is Calendar.setTime: all fields computed from the instant.
func (c *jcal) setTime(unixMilli int64) {
	t := time.UnixMilli(unixMilli).In(c.loc)
	c.year = t.Year()
	c.month = int(t.Month()) - 1
	c.day = t.Day()
	c.hour = t.Hour()
	c.min = t.Minute()
	c.sec = t.Second()
	c.ms = t.Nanosecond() / 1e6
	c.instant = unixMilli
	c.dirty = false
}

// complete normalises the fields (Calendar.complete): local time to instant, then back.
func (c *jcal) complete() {
	if !c.dirty {
		return
	}
	y := int64(c.year) + floorDiv(int64(c.month), 12)
	m := floorMod(int64(c.month), 12)
	days := daysFromCivil(y, m+1, 1) + int64(c.day) - 1
	wallMs := days*86400000 + int64(c.hour)*3600000 + int64(c.min)*60000 + int64(c.sec)*1000 + int64(c.ms)
	off := javaOffsetForWall(c.loc, floorDiv(wallMs, 1000))
	c.setTime(wallMs - int64(off)*1000)
}

func (c *jcal) time() time.Time {
	c.complete()
	return time.UnixMilli(c.instant)
}

func (c *jcal) getYear() int   { c.complete(); return c.year }
func (c *jcal) getMonth() int  { c.complete(); return c.month }
func (c *jcal) getDay() int    { c.complete(); return c.day }
func (c *jcal) getHour() int   { c.complete(); return c.hour }
func (c *jcal) getMinute() int { c.complete(); return c.min }
func (c *jcal) getSecond() int { c.complete(); return c.sec }

// getDayOfWeek returns Java's DAY_OF_WEEK: Sunday = 1 … Saturday = 7.
func (c *jcal) getDayOfWeek() int {
	c.complete()
	return int(time.UnixMilli(c.instant).In(c.loc).Weekday()) + 1
}

func (c *jcal) setYear(v int)   { c.year = v; c.dirty = true }
func (c *jcal) setMonth(v int)  { c.month = v; c.dirty = true }
func (c *jcal) setDay(v int)    { c.day = v; c.dirty = true }
func (c *jcal) setHour(v int)   { c.hour = v; c.dirty = true }
func (c *jcal) setMinute(v int) { c.min = v; c.dirty = true }
func (c *jcal) setSecond(v int) { c.sec = v; c.dirty = true }
func (c *jcal) setMilli(v int)  { c.ms = v; c.dirty = true }

// addYears is Calendar.add(YEAR, n): normalise, add, pin the day to the month's length.
func (c *jcal) addYears(n int) {
	c.complete()
	c.year += n
	if ld := lastDayOfMonth(c.month+1, c.year); c.day > ld {
		c.day = ld
	}
	c.dirty = true
}

// javaOffsetForWall returns the UTC offset, in seconds, that the JDK uses for the local
// (wall-clock) time wall, given as seconds since 1970-01-01T00:00 local: the offset of the last
// zone transition whose local start, measured in its new offset, is at or before wall.
func javaOffsetForWall(loc *time.Location, wall int64) int {
	// First guess: the offset in force at the instant numerically equal to wall.
	_, off := time.Unix(wall, 0).In(loc).Zone()
	u := wall - int64(off)
	for range 6 {
		t := time.Unix(u, 0).In(loc)
		_, off = t.Zone()
		start, end := t.ZoneBounds()
		if !start.IsZero() && wall < start.Unix()+int64(off) {
			u = start.Unix() - 1
			continue
		}
		if !end.IsZero() {
			_, offN := end.In(loc).Zone()
			if wall >= end.Unix()+int64(offN) {
				u = end.Unix()
				continue
			}
		}
		return off
	}
	return off
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// daysFromCivil returns the days since 1970-01-01 of the proleptic Gregorian date y-m-d
// (m 1..12, d 1..31). Howard Hinnant's algorithm.
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := floorDiv(y, 400)
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

func isLeapYear(y int) bool { return (y%4 == 0 && y%100 != 0) || y%400 == 0 }

// lastDayOfMonth returns the length of month m (1..12) of year y.
func lastDayOfMonth(m, y int) int {
	switch m {
	case 2:
		if isLeapYear(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	default:
		return 31
	}
}

// addMillis is Calendar.add for the time fields (HOUR_OF_DAY, MINUTE, SECOND): instant
// arithmetic.
func (c *jcal) addMillis(delta int64) {
	c.complete()
	c.setTime(c.instant + delta)
}

func (c *jcal) offsetSeconds() int64 {
	_, off := time.UnixMilli(c.instant).In(c.loc).Zone()
	return int64(off)
}

// addDays is Calendar.add(DATE/DAY_OF_YEAR, n) (and WEEK_OF_YEAR with 7n): move the local date,
// keep the local time of day if the zone allows, else keep the elapsed time.
func (c *jcal) addDays(n int64) {
	c.complete()
	oldOff := c.offsetSeconds()
	fd := daysFromCivil(int64(c.year), int64(c.month)+1, int64(c.day)) + n
	tod := int64(c.hour)*3600000 + int64(c.min)*60000 + int64(c.sec)*1000 + int64(c.ms)
	t1 := fd*86400000 + tod - oldOff*1000
	c.setTime(t1)
	if zo := (oldOff - c.offsetSeconds()) * 1000; zo != 0 {
		c.setTime(t1 + zo)
		if daysFromCivil(int64(c.year), int64(c.month)+1, int64(c.day)) != fd {
			c.setTime(t1)
		}
	}
}

// addMonths is Calendar.add(MONTH, n): move the month, pin the day to the month's length; the
// local time of day is kept (resolved like any local time).
func (c *jcal) addMonths(n int) {
	c.complete()
	m := int64(c.month) + int64(n)
	c.year += int(floorDiv(m, 12))
	c.month = int(floorMod(m, 12))
	if ld := lastDayOfMonth(c.month+1, c.year); c.day > ld {
		c.day = ld
	}
	c.dirty = true
}
