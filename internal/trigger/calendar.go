package trigger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Calendars (Quartz org.quartz.impl.calendar) exclude times from triggers' schedules. Each kind
// may have a Base calendar: a time is included only if the base includes it too.
//
// JSON form (ParseCalendar reads it, json.Marshal of the concrete types writes it):
//
//	{"type": "annual",  "days": ["12-25", "01-01"]}            month-day excluded every year
//	{"type": "holiday", "dates": ["2026-12-25", "2027-01-01"]} whole dates excluded
//	{"type": "monthly", "days": [1, 15, 31]}                    days of the month excluded
//	{"type": "weekly",  "days": ["SAT", "SUN"]}                 days of the week excluded
//	                                                            (omitted: SAT and SUN, as Quartz)
//	{"type": "daily",   "start": "09:00", "end": "17:30:00.000", "invert": false}
//	        excluded: start..end (inclusive) each day; with invert, everything but start..end
//	{"type": "cron",    "expression": "* * 0-7 ? * MON-FRI"}   excluded when the expression matches
//
// Every kind also takes "timeZone" (IANA name in which days and times of day are read; "" =
// UTC), "description", and "base" (another calendar object). Unknown fields are rejected.
//
// One deliberate difference from Quartz: Quartz's DailyCalendar (not inverted) also excludes
// exactly 00:00:00.000 and 23:59:59.999 of every day (an off-by-one in its comparisons), which
// silently stops a midnight cron trigger from ever firing. Here only start..end is excluded.

// AnnualCalendar excludes days of the year (month and day) every year.
type AnnualCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location // nil = UTC
	Days        []MonthDay
}

// MonthDay is a day of the year without a year.
type MonthDay struct {
	Month time.Month
	Day   int
}

// HolidayCalendar excludes whole dates.
type HolidayCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location // nil = UTC
	Dates       []Date
}

// Date is a calendar date without a time of day.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// MonthlyCalendar excludes days of the month (1..31).
type MonthlyCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location
	Days        []int
}

// WeeklyCalendar excludes days of the week (Quartz numbering, 1 = Sunday).
type WeeklyCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location
	Days        DaysOfWeek
}

// DailyCalendar excludes a time range of every day (or everything but it, with Invert).
type DailyCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location
	Start, End  TimeOfDay
	Invert      bool
}

// TimeOfDay is a wall-clock time of day with millisecond precision.
type TimeOfDay struct{ Hour, Minute, Second, Millisecond int }

func (d TimeOfDay) String() string {
	if d.Millisecond != 0 {
		return fmt.Sprintf("%02d:%02d:%02d.%03d", d.Hour, d.Minute, d.Second, d.Millisecond)
	}
	return fmt.Sprintf("%02d:%02d:%02d", d.Hour, d.Minute, d.Second)
}

func (d TimeOfDay) millis() int64 {
	return int64(d.Hour)*3600000 + int64(d.Minute)*60000 + int64(d.Second)*1000 + int64(d.Millisecond)
}

// parseTimeOfDay reads "HH:MM", "HH:MM:SS", "HH:MM:SS.mmm" (or Quartz's "HH:MM:SS:mmm").
func parseTimeOfDay(s string) (TimeOfDay, error) {
	bad := fmt.Errorf("%q is not a time of day such as \"09:00\", \"17:30:00\" or \"17:30:00.500\"", s)
	s = strings.Replace(s, ".", ":", 1)
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return TimeOfDay{}, bad
	}
	var v [4]int
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || p == "" || p[0] == '+' || p[0] == '-' {
			return TimeOfDay{}, bad
		}
		v[i] = n
	}
	d := TimeOfDay{v[0], v[1], v[2], v[3]}
	if d.Hour > 23 || d.Minute > 59 || d.Second > 59 || d.Millisecond > 999 {
		return TimeOfDay{}, fmt.Errorf("%q is out of range (hours 0-23, minutes and seconds 0-59, milliseconds 0-999)", s)
	}
	return d, nil
}

// CronCalendar excludes the times its cron expression matches (to the second).
type CronCalendar struct {
	Base        Calendar
	Description string
	Location    *time.Location
	Expression  *CronExpression
}

func locOrUTC(l *time.Location) *time.Location {
	if l == nil {
		return time.UTC
	}
	return l
}

func baseIncludes(b Calendar, t time.Time) bool { return b == nil || b.IsTimeIncluded(t) }

// startOfDay returns local midnight of t's day in loc, as Java computes it (a midnight in a gap
// becomes the first instant after the gap).
func startOfDay(t time.Time, loc *time.Location) time.Time {
	c := newJcal(loc, t)
	c.setHour(0)
	c.setMinute(0)
	c.setSecond(0)
	c.setMilli(0)
	return c.time()
}

// nextDayStart returns the start of the day after t's (Calendar.add(DATE, 1) on a midnight).
func nextDayStart(t time.Time, loc *time.Location) time.Time {
	c := newJcal(loc, t)
	c.setDay(c.getDay() + 1)
	c.setHour(0)
	c.setMinute(0)
	c.setSecond(0)
	c.setMilli(0)
	return c.time()
}

// nextIncluded combines a calendar's own lower bound for its next included time with its
// base's: it returns a time ≥ t that is not after the first time ≥ t both include (t itself
// when t is included), or zero when the calendar includes nothing from t on. It takes one step
// only (callers such as Trigger's skip loop call again), so that the cost of a chain of base
// calendars grows with its length, not exponentially.
func nextIncluded(t time.Time, self Calendar, base Calendar, own func(time.Time) time.Time) time.Time {
	if self.IsTimeIncluded(t) {
		return t
	}
	y := own(t)
	if y.IsZero() {
		return time.Time{}
	}
	if base != nil {
		b := base.NextIncludedTime(t)
		if b.IsZero() {
			return time.Time{}
		}
		if b.After(y) {
			y = b
		}
	}
	if y.Before(t) {
		return t
	}
	return y
}

// skipDays returns the start of the first day from t's day on that excluded does not reject
// (t itself when its day is fine), or, after 8 years of excluded days, the start of the day
// after them (a lower bound, as NextIncludedTime allows).
func skipDays(t time.Time, loc *time.Location, excluded func(time.Time) bool) time.Time {
	if !excluded(t) {
		return t
	}
	d := startOfDay(t, loc)
	for range 8 * 366 {
		d = nextDayStart(d, loc)
		if !excluded(d) {
			return d
		}
	}
	return d
}

func (c *AnnualCalendar) dayExcluded(t time.Time) bool {
	_, month, day, _ := localDate(t, locOrUTC(c.Location))
	for _, d := range c.Days {
		if d.Month == month && d.Day == day {
			return true
		}
	}
	return false
}

// IsTimeIncluded implements Calendar.
func (c *AnnualCalendar) IsTimeIncluded(t time.Time) bool {
	return baseIncludes(c.Base, t) && !c.dayExcluded(t)
}

// NextIncludedTime implements Calendar.
func (c *AnnualCalendar) NextIncludedTime(t time.Time) time.Time {
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time { return skipDays(x, locOrUTC(c.Location), c.dayExcluded) })
}

func (c *HolidayCalendar) dayExcluded(t time.Time) bool {
	year, month, day, _ := localDate(t, locOrUTC(c.Location))
	for _, d := range c.Dates {
		if d.Year == year && d.Month == month && d.Day == day {
			return true
		}
	}
	return false
}

// IsTimeIncluded implements Calendar.
func (c *HolidayCalendar) IsTimeIncluded(t time.Time) bool {
	return baseIncludes(c.Base, t) && !c.dayExcluded(t)
}

// NextIncludedTime implements Calendar.
func (c *HolidayCalendar) NextIncludedTime(t time.Time) time.Time {
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time { return skipDays(x, locOrUTC(c.Location), c.dayExcluded) })
}

func (c *MonthlyCalendar) allExcluded() bool {
	for d := 1; d <= 31; d++ {
		if !slices.Contains(c.Days, d) {
			return false
		}
	}
	return true
}

func (c *MonthlyCalendar) dayExcluded(t time.Time) bool {
	_, _, day, _ := localDate(t, locOrUTC(c.Location))
	return slices.Contains(c.Days, day)
}

// IsTimeIncluded implements Calendar.
func (c *MonthlyCalendar) IsTimeIncluded(t time.Time) bool {
	return !c.allExcluded() && baseIncludes(c.Base, t) && !c.dayExcluded(t)
}

// NextIncludedTime implements Calendar.
func (c *MonthlyCalendar) NextIncludedTime(t time.Time) time.Time {
	if c.allExcluded() {
		return time.Time{}
	}
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time { return skipDays(x, locOrUTC(c.Location), c.dayExcluded) })
}

func (c *WeeklyCalendar) allExcluded() bool {
	for d := 1; d <= 7; d++ {
		if !slices.Contains(c.Days, d) {
			return false
		}
	}
	return true
}

func (c *WeeklyCalendar) dayExcluded(t time.Time) bool {
	_, _, _, dow := localDate(t, locOrUTC(c.Location))
	return slices.Contains(c.Days, dow)
}

// IsTimeIncluded implements Calendar.
func (c *WeeklyCalendar) IsTimeIncluded(t time.Time) bool {
	return !c.allExcluded() && baseIncludes(c.Base, t) && !c.dayExcluded(t)
}

// NextIncludedTime implements Calendar.
func (c *WeeklyCalendar) NextIncludedTime(t time.Time) time.Time {
	if c.allExcluded() {
		return time.Time{}
	}
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time { return skipDays(x, locOrUTC(c.Location), c.dayExcluded) })
}

// rangeOn returns the instants of Start and End on t's day (Java resolution of local times).
func (c *DailyCalendar) rangeOn(t time.Time) (start, end time.Time) {
	jc := newJcal(locOrUTC(c.Location), t)
	y, m, d := jc.year, jc.month, jc.day
	at := func(tod TimeOfDay) time.Time {
		jc.year, jc.month, jc.day = y, m, d
		jc.setHour(tod.Hour)
		jc.setMinute(tod.Minute)
		jc.setSecond(tod.Second)
		jc.setMilli(tod.Millisecond)
		return jc.time()
	}
	return at(c.Start), at(c.End)
}

func (c *DailyCalendar) ownIncluded(t time.Time) bool {
	s, e := c.rangeOn(t)
	in := !t.Before(s) && !t.After(e)
	return in == c.Invert
}

// IsTimeIncluded implements Calendar.
func (c *DailyCalendar) IsTimeIncluded(t time.Time) bool {
	return baseIncludes(c.Base, t) && c.ownIncluded(t)
}

// NextIncludedTime implements Calendar.
func (c *DailyCalendar) NextIncludedTime(t time.Time) time.Time {
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time {
		if c.ownIncluded(x) {
			return x
		}
		s, e := c.rangeOn(x)
		if !c.Invert {
			return e.Add(time.Millisecond) // inside the excluded range
		}
		if x.Before(s) {
			return s
		}
		ns, _ := c.rangeOn(nextDayStart(x, locOrUTC(c.Location)))
		return ns
	})
}

// satisfiedBy is Quartz's CronExpression.isSatisfiedBy: t, truncated to the second, is a time
// the expression selects.
func cronSatisfiedBy(ce *CronExpression, loc *time.Location, t time.Time) bool {
	sec := time.Unix(floorDiv(t.UnixMilli(), 1000), 0)
	n, ok := ce.Next(sec.Add(-time.Second), loc)
	return ok && n.Equal(sec)
}

// IsTimeIncluded implements Calendar.
func (c *CronCalendar) IsTimeIncluded(t time.Time) bool {
	return baseIncludes(c.Base, t) && !cronSatisfiedBy(c.Expression, locOrUTC(c.Location), t)
}

// NextIncludedTime implements Calendar.
func (c *CronCalendar) NextIncludedTime(t time.Time) time.Time {
	loc := locOrUTC(c.Location)
	return nextIncluded(t, c, c.Base, func(x time.Time) time.Time { return cronNextUnmatched(c.Expression, loc, x) })
}

// cronNextUnmatched returns the first second at or after x that the expression does not
// select (Quartz getNextInvalidTimeAfter), or a lower bound of it after a bounded walk. It
// walks at the coarsest step at which matching cannot change within a step: seconds while the
// seconds field is not '*'-complete, then minutes, then hours (minutes again across a zone
// shift that is not whole hours), then local days.
func cronNextUnmatched(ce *CronExpression, loc *time.Location, x time.Time) time.Time {
	sat := func(t time.Time) bool { return cronSatisfiedBy(ce, loc, t) }
	if !sat(x) {
		return x
	}
	s := time.Unix(floorDiv(x.UnixMilli(), 1000), 0)
	switch {
	case !ce.fullField(fSecond, 0, 59):
		for range 61 {
			s = s.Add(time.Second)
			if !sat(s) {
				return s
			}
		}
		return s
	case !ce.fullField(fMinute, 0, 59):
		s = s.Truncate(time.Minute) // offsets are whole minutes since 1970
		for range 61 {
			s = s.Add(time.Minute)
			if !sat(s) {
				return s
			}
		}
		return s
	case !ce.fullField(fHour, 0, 23):
		s = s.Truncate(time.Minute)
		for range 24 * 62 {
			// Step to the next local hour start; across a shift that is not whole hours the
			// next one is found minute by minute.
			n := s.Add(time.Hour - time.Duration(localMinute(s, loc))*time.Minute)
			if localMinute(n, loc) != 0 {
				n = s.Add(time.Minute)
			}
			s = n
			if !sat(s) {
				return s
			}
		}
		return s
	default:
		d := startOfDay(s, loc)
		for range 3660 {
			d = nextDayStart(d, loc)
			if !sat(d) {
				return d
			}
		}
		return d
	}
}

// fullField reports whether the field selects every value lo..hi.
func (c *CronExpression) fullField(f, lo, hi int) bool {
	for v := lo; v <= hi; v++ {
		if !contains(c.sets[f], v) {
			return false
		}
	}
	return true
}

// calendarJSON is the stored form of every calendar kind.
type calendarJSON struct {
	Type        string          `json:"type"`
	Description string          `json:"description,omitempty"`
	TimeZone    string          `json:"timeZone,omitempty"`
	Base        json.RawMessage `json:"base,omitempty"`
	Days        json.RawMessage `json:"days,omitempty"`
	Dates       []string        `json:"dates,omitempty"`
	Start       string          `json:"start,omitempty"`
	End         string          `json:"end,omitempty"`
	Invert      bool            `json:"invert,omitempty"`
	Expression  string          `json:"expression,omitempty"`
}

// maxCalendarDepth bounds base-calendar chains read from JSON.
const maxCalendarDepth = 16

// ParseCalendar reads the JSON form of a calendar (see the calendar types' documentation in
// calendar.go: {"type": "annual"|"holiday"|"monthly"|"weekly"|"daily"|"cron", …, "base": {…}}).
// Errors are *FieldError with Field relative to the calendar object (e.g. "base.days").
func ParseCalendar(data []byte) (Calendar, error) {
	return parseCalendar(data, "", 0)
}

func parseCalendar(data []byte, prefix string, depth int) (Calendar, error) {
	if depth >= maxCalendarDepth {
		return nil, fieldErr(strings.TrimSuffix(prefix, "."), "base calendars nest more than %d deep", maxCalendarDepth)
	}
	var j calendarJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return nil, fieldErr(strings.TrimSuffix(prefix, "."), "not a calendar object: %v", err)
	}
	f := func(name string) string { return prefix + name }
	loc, err := loadZone(j.TimeZone)
	if err != nil {
		return nil, fieldErr(f("timeZone"), "%v", err)
	}
	var base Calendar
	if len(j.Base) > 0 && string(j.Base) != "null" {
		base, err = parseCalendar(j.Base, f("base."), depth+1)
		if err != nil {
			return nil, err
		}
	}
	only := func(allowed ...string) error {
		set := map[string]bool{
			"days": len(j.Days) > 0, "dates": len(j.Dates) > 0, "start": j.Start != "",
			"end": j.End != "", "invert": j.Invert, "expression": j.Expression != "",
		}
		for name, present := range set {
			if present && !slices.Contains(allowed, name) {
				return fieldErr(f(name), "not a field of a %s calendar", j.Type)
			}
		}
		return nil
	}
	switch j.Type {
	case "annual":
		if err := only("days"); err != nil {
			return nil, err
		}
		var raw []string
		if err := json.Unmarshal(orEmptyList(j.Days), &raw); err != nil {
			return nil, fieldErr(f("days"), "must be a list of \"MM-DD\" strings")
		}
		c := &AnnualCalendar{Base: base, Description: j.Description, Location: loc}
		for i, s := range raw {
			t, err := time.Parse("01-02", s)
			if err != nil {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", f("days"), i), "%q is not a month-day such as \"12-25\"", s)
			}
			c.Days = append(c.Days, MonthDay{t.Month(), t.Day()})
		}
		return c, nil
	case "holiday":
		if err := only("dates"); err != nil {
			return nil, err
		}
		c := &HolidayCalendar{Base: base, Description: j.Description, Location: loc}
		for i, s := range j.Dates {
			t, err := time.Parse(time.DateOnly, s)
			if err != nil {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", f("dates"), i), "%q is not a date such as \"2026-12-25\"", s)
			}
			c.Dates = append(c.Dates, Date{t.Year(), t.Month(), t.Day()})
		}
		return c, nil
	case "monthly":
		if err := only("days"); err != nil {
			return nil, err
		}
		var days []int
		if err := json.Unmarshal(orEmptyList(j.Days), &days); err != nil {
			return nil, fieldErr(f("days"), "must be a list of days of the month (1-31)")
		}
		for i, d := range days {
			if d < 1 || d > 31 {
				return nil, fieldErr(fmt.Sprintf("%s[%d]", f("days"), i), "day of month %d is not between 1 and 31", d)
			}
		}
		return &MonthlyCalendar{Base: base, Description: j.Description, Location: loc, Days: days}, nil
	case "weekly":
		if err := only("days"); err != nil {
			return nil, err
		}
		days := DaysOfWeek{1, 7} // Quartz's default: Saturday and Sunday excluded
		if len(j.Days) > 0 {
			days = nil
			if err := json.Unmarshal(j.Days, &days); err != nil {
				return nil, fieldErr(f("days"), "%v", err)
			}
			for i, d := range days {
				if d < 1 || d > 7 {
					return nil, fieldErr(fmt.Sprintf("%s[%d]", f("days"), i), "day of week %d is not between 1 (Sunday) and 7 (Saturday)", d)
				}
			}
		}
		return &WeeklyCalendar{Base: base, Description: j.Description, Location: loc, Days: days}, nil
	case "daily":
		if err := only("start", "end", "invert"); err != nil {
			return nil, err
		}
		s, err := parseTimeOfDay(j.Start)
		if err != nil {
			return nil, fieldErr(f("start"), "%v", err)
		}
		e, err := parseTimeOfDay(j.End)
		if err != nil {
			return nil, fieldErr(f("end"), "%v", err)
		}
		if s.millis() >= e.millis() {
			return nil, fieldErr(f("end"), "end %s must be after start %s", e, s)
		}
		return &DailyCalendar{Base: base, Description: j.Description, Location: loc, Start: s, End: e, Invert: j.Invert}, nil
	case "cron":
		if err := only("expression"); err != nil {
			return nil, err
		}
		ce, err := ParseCron(j.Expression)
		if err != nil {
			return nil, fieldErr(f("expression"), "%v", err)
		}
		return &CronCalendar{Base: base, Description: j.Description, Location: loc, Expression: ce}, nil
	case "":
		return nil, fieldErr(f("type"), "missing; use annual, holiday, monthly, weekly, daily or cron")
	default:
		return nil, fieldErr(f("type"), "unknown calendar type %q; use annual, holiday, monthly, weekly, daily or cron", j.Type)
	}
}

func orEmptyList(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("[]")
	}
	return b
}

func zoneName(l *time.Location) string {
	if l == nil || l == time.UTC {
		return ""
	}
	return l.String()
}

func baseJSON(b Calendar) (json.RawMessage, error) {
	if b == nil {
		return nil, nil
	}
	m, ok := b.(json.Marshaler)
	if !ok {
		return nil, errors.New("base calendar cannot be written as JSON")
	}
	return m.MarshalJSON()
}

func marshalCalendar(kind, desc string, loc *time.Location, base Calendar, fill func(*calendarJSON) error) ([]byte, error) {
	b, err := baseJSON(base)
	if err != nil {
		return nil, err
	}
	j := calendarJSON{Type: kind, Description: desc, TimeZone: zoneName(loc), Base: b}
	if err := fill(&j); err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// MarshalJSON writes the form ParseCalendar reads.
func (c *AnnualCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("annual", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		days := make([]string, len(c.Days))
		for i, d := range c.Days {
			days[i] = fmt.Sprintf("%02d-%02d", int(d.Month), d.Day)
		}
		var err error
		j.Days, err = json.Marshal(days)
		return err
	})
}

// MarshalJSON writes the form ParseCalendar reads.
func (c *HolidayCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("holiday", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		for _, d := range c.Dates {
			j.Dates = append(j.Dates, fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day))
		}
		return nil
	})
}

// MarshalJSON writes the form ParseCalendar reads.
func (c *MonthlyCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("monthly", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		var err error
		j.Days, err = json.Marshal(c.Days)
		return err
	})
}

// MarshalJSON writes the form ParseCalendar reads (an empty list when nothing is excluded, so
// that Quartz's default of SAT and SUN does not come back).
func (c *WeeklyCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("weekly", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		days := c.Days
		if days == nil {
			days = DaysOfWeek{}
		}
		var err error
		j.Days, err = json.Marshal(days)
		return err
	})
}

// MarshalJSON writes the form ParseCalendar reads.
func (c *DailyCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("daily", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		j.Start, j.End, j.Invert = c.Start.String(), c.End.String(), c.Invert
		return nil
	})
}

// MarshalJSON writes the form ParseCalendar reads.
func (c *CronCalendar) MarshalJSON() ([]byte, error) {
	return marshalCalendar("cron", c.Description, c.Location, c.Base, func(j *calendarJSON) error {
		j.Expression = c.Expression.String()
		return nil
	})
}

func localMinute(t time.Time, loc *time.Location) int {
	ms := t.UnixMilli()
	off := zonePeriodAt(loc, floorDiv(ms, 1000)).off
	return int(floorMod(floorDiv(ms+off*1000, 60000), 60))
}
