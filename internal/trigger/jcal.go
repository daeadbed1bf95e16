package trigger

import (
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

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
	dow                                  int   // Java DAY_OF_WEEK of the fields, valid when !dirty

	// periods caches the last zone periods looked up: time.Location lookups past the end of a
	// zone's table evaluate its TZ rule string each time, and Quartz's searches look up the
	// same period over and over.
	periods [2]zonePeriod
	next    int
}

// zonePeriod is a stretch [start, end) of Unix seconds with one UTC offset.
type zonePeriod struct {
	start, end int64
	off        int64
	valid      bool
}

func (c *jcal) period(u int64) zonePeriod {
	for _, p := range c.periods {
		if p.valid && u >= p.start && u < p.end {
			return p
		}
	}
	p := zonePeriodAt(c.loc, u)
	c.periods[c.next] = p
	c.next = (c.next + 1) % len(c.periods)
	return p
}

func newJcal(loc *time.Location, t time.Time) *jcal {
	c := &jcal{loc: loc}
	c.setTime(t.UnixMilli())
	return c
}

// setTime is Calendar.setTime: all fields computed from the instant.
func (c *jcal) setTime(unixMilli int64) {
	off := c.period(floorDiv(unixMilli, 1000)).off
	local := unixMilli + off*1000
	days := floorDiv(local, 86400000)
	tod := local - days*86400000
	y, m, d := civilFromDays(days)
	c.year, c.month, c.day = int(y), int(m)-1, int(d)
	c.hour = int(tod / 3600000)
	c.min = int(tod / 60000 % 60)
	c.sec = int(tod / 1000 % 60)
	c.ms = int(tod % 1000)
	c.dow = int(floorMod(days+4, 7)) + 1 // 1970-01-01 was a Thursday; Sunday = 1
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
	off := c.offsetForWall(floorDiv(wallMs, 1000))
	c.setTime(wallMs - off*1000)
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
	return c.dow
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

// offsetForWall returns the UTC offset, in seconds, that the JDK uses for the local
// (wall-clock) time wall, given as seconds since 1970-01-01T00:00 local: the offset of the last
// zone transition whose local start, measured in its new offset, is at or before wall.
func (c *jcal) offsetForWall(wall int64) int64 {
	// First guess: the offset in force at the instant numerically equal to wall.
	p := c.period(wall)
	u := wall - p.off
	for range 6 {
		p = c.period(u)
		if p.start != math.MinInt64 && wall < p.start+p.off {
			u = p.start - 1
			continue
		}
		if p.end != math.MaxInt64 {
			if n := c.period(p.end); wall >= p.end+n.off {
				u = p.end
				continue
			}
		}
		return p.off
	}
	return p.off
}

// civilFromDays converts days since 1970-01-01 to a proleptic Gregorian date (Hinnant).
func civilFromDays(z int64) (y, m, d int64) {
	z += 719468
	era := floorDiv(z, 146097)
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y = yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d = doy - (153*mp+2)/5 + 1
	if mp < 10 {
		m = mp + 3
	} else {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	return y, m, d
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
	return c.period(floorDiv(c.instant, 1000)).off
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

// locPeriods is a process-wide cache of the zone periods of one location, sorted by start.
type locPeriods struct {
	mu sync.RWMutex
	ps []zonePeriod
}

var periodCache sync.Map // *time.Location -> *locPeriods

// maxCachedPeriods bounds one location's cache (about two periods a year for DST zones).
const maxCachedPeriods = 8192

func zonePeriodAt(loc *time.Location, u int64) zonePeriod {
	v, ok := periodCache.Load(loc)
	if !ok {
		v, _ = periodCache.LoadOrStore(loc, &locPeriods{})
	}
	lp := v.(*locPeriods)
	find := func() (int, bool) {
		i := sort.Search(len(lp.ps), func(i int) bool { return lp.ps[i].end > u })
		return i, i < len(lp.ps) && lp.ps[i].start <= u
	}
	lp.mu.RLock()
	i, hit := find()
	if hit {
		p := lp.ps[i]
		lp.mu.RUnlock()
		return p
	}
	lp.mu.RUnlock()

	t := time.Unix(u, 0).In(loc)
	_, off := t.Zone()
	s, e := t.ZoneBounds()
	p := zonePeriod{start: math.MinInt64, end: math.MaxInt64, off: int64(off), valid: true}
	if !s.IsZero() {
		p.start = s.Unix()
	}
	if !e.IsZero() {
		p.end = e.Unix()
	}
	if u < p.start || u >= p.end {
		// Past the end of a zone's table Go derives the bounds from its TZ rule with year
		// arithmetic that can miss the instant itself (the last day of a leap year): the
		// offset is right, the bounds are not usable.
		return zonePeriod{start: u, end: u + 1, off: int64(off), valid: true}
	}
	lp.mu.Lock()
	if len(lp.ps) < maxCachedPeriods {
		if i, hit := find(); !hit &&
			(i == 0 || lp.ps[i-1].end <= p.start) && (i == len(lp.ps) || p.end <= lp.ps[i].start) {
			lp.ps = slices.Insert(lp.ps, i, p)
		}
	}
	lp.mu.Unlock()
	return p
}

// localDate returns t's local date and Java day of week (Sunday = 1) in loc, using the
// period cache (time.Time's accessors look the zone up again on every call).
func localDate(t time.Time, loc *time.Location) (year int, month time.Month, day, dow int) {
	ms := t.UnixMilli()
	off := zonePeriodAt(loc, floorDiv(ms, 1000)).off
	days := floorDiv(ms+off*1000, 86400000)
	y, m, d := civilFromDays(days)
	return int(y), time.Month(m), int(d), int(floorMod(days+4, 7)) + 1
}
