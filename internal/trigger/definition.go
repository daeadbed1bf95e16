package trigger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // evaluate IANA zones in containers that ship no zoneinfo
)

// Definition is the user-supplied schedule of one trigger, as in docs/contract.md's trigger object,
// minus group/name/priority/calendar/data (the caller handles those). JSON tags are the wire
// names. It is stored as jsonb and read back, so json.Marshal/Unmarshal round-trip it; misfire
// handling may change fields of it (Simple repeatCount and startAt for the reschedule_now_*
// instructions), which is why Trigger carries it by value and the caller stores it again after
// changes.
//
// Exactly one of Cron, Simple, CalendarInterval and DailyTimeInterval is set.
type Definition struct {
	Cron              *CronSchedule              `json:"cron,omitempty"`
	Simple            *SimpleSchedule            `json:"simple,omitempty"`
	CalendarInterval  *CalendarIntervalSchedule  `json:"calendarInterval,omitempty"`
	DailyTimeInterval *DailyTimeIntervalSchedule `json:"dailyTimeInterval,omitempty"`
	// Misfire is the Quartz misfire instruction in snake_case; "" means smart_policy. Which
	// names are allowed depends on the kind: see MisfireInstructions.
	Misfire string     `json:"misfire,omitempty"`
	StartAt *time.Time `json:"startAt,omitempty"`
	EndAt   *time.Time `json:"endAt,omitempty"`
}

// CronSchedule fires at the times a Quartz cron expression selects, in TimeZone.
type CronSchedule struct {
	Expression string `json:"expression"`
	// TimeZone is an IANA zone name; "" means UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// SimpleSchedule fires at StartAt and then every Interval, RepeatCount more times
// (RepeatCount -1: for ever; 0: once).
type SimpleSchedule struct {
	// Interval is a Go duration ("10s", "1h30m") or an ISO 8601 duration ("PT10S", "P1DT2H");
	// whole milliseconds, at least 1ms. It may be omitted when RepeatCount is 0.
	Interval    string `json:"interval,omitempty"`
	RepeatCount int    `json:"repeatCount"`
}

// CalendarIntervalSchedule fires every Interval Units of calendar time counted in TimeZone
// from StartAt (a month is a calendar month, a day a calendar day).
type CalendarIntervalSchedule struct {
	Interval int `json:"interval"`
	// Unit is one of second, minute, hour, day, week, month, year.
	Unit string `json:"unit"`
	// TimeZone is an IANA zone name; "" means UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// PreserveHourOfDayAcrossDaylightSavings keeps the wall-clock hour of StartAt for units of a
	// day or more even when a DST change lies in between.
	PreserveHourOfDayAcrossDaylightSavings bool `json:"preserveHourOfDayAcrossDaylightSavings,omitempty"`
	// SkipDayIfHourDoesNotExist (with the option above) skips a day whose hour does not exist
	// (spring-forward gap) instead of firing at the next valid hour.
	SkipDayIfHourDoesNotExist bool `json:"skipDayIfHourDoesNotExist,omitempty"`
}

// DailyTimeIntervalSchedule fires every Interval Units between StartTimeOfDay and EndTimeOfDay
// (inclusive) on DaysOfWeek, in TimeZone.
type DailyTimeIntervalSchedule struct {
	// StartTimeOfDay is "HH:MM:SS" (or "HH:MM"); "" means 00:00:00.
	StartTimeOfDay string `json:"startTimeOfDay,omitempty"`
	// EndTimeOfDay is "HH:MM:SS" (or "HH:MM"); "" means 23:59:59.
	EndTimeOfDay string `json:"endTimeOfDay,omitempty"`
	// DaysOfWeek lists the days it fires on; empty means every day.
	DaysOfWeek DaysOfWeek `json:"daysOfWeek,omitempty"`
	Interval   int        `json:"interval"`
	// Unit is one of second, minute, hour.
	Unit string `json:"unit"`
	// RepeatCount -1 means no limit; n ≥ 0 stops after n+1 fires. Absent in JSON means -1
	// (Quartz's default); the Go zero value 0 means one fire.
	RepeatCount int `json:"repeatCount"`
	// TimeZone is an IANA zone name; "" means UTC.
	TimeZone string `json:"timeZone,omitempty"`
}

// DaysOfWeek is a set of days in Quartz's numbering: 1 = Sunday … 7 = Saturday
// (java.util.Calendar). In JSON it is written as names (["MON","TUE"]) and read from names
// (SUN…SAT, case-insensitive, full names too) or from numbers in Quartz's numbering.
type DaysOfWeek []int

var dayNamesOrdered = [...]string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}

// MarshalJSON writes day names, which cannot be misread as ISO (Monday = 1) numbers.
func (d DaysOfWeek) MarshalJSON() ([]byte, error) {
	names := make([]string, 0, len(d))
	for _, v := range d {
		if v < 1 || v > 7 {
			names = append(names, strconv.Itoa(v))
			continue
		}
		names = append(names, dayNamesOrdered[v-1])
	}
	return json.Marshal(names)
}

// UnmarshalJSON reads names or Quartz numbers (1 = Sunday).
func (d *DaysOfWeek) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("daysOfWeek must be a list of day names (SUN…SAT) or numbers (1 = Sunday … 7 = Saturday): %w", err)
	}
	out := make(DaysOfWeek, 0, len(raw))
	for _, r := range raw {
		var n int
		if err := json.Unmarshal(r, &n); err == nil {
			out = append(out, n) // range checked by Validate
			continue
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return fmt.Errorf("daysOfWeek: %s is neither a day name nor a number", r)
		}
		v, ok := parseDayName(s)
		if !ok {
			return fmt.Errorf("daysOfWeek: unknown day %q (use SUN…SAT or 1 = Sunday … 7 = Saturday)", s)
		}
		out = append(out, v)
	}
	*d = out
	return nil
}

func parseDayName(s string) (int, bool) {
	u := strings.ToUpper(strings.TrimSpace(s))
	for i, n := range dayNamesOrdered {
		full := strings.ToUpper(time.Weekday(i).String())
		if u == n || u == full {
			return i + 1, true
		}
	}
	if n, err := strconv.Atoi(u); err == nil {
		return n, true
	}
	return 0, false
}

// FieldError is a validation error of one field of a trigger object.
type FieldError struct {
	// Field is the path relative to the trigger object, e.g. "cron.expression", "simple.interval".
	Field string
	// Message says what is wrong in words a person can act on.
	Message string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Message
	}
	return e.Field + ": " + e.Message
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ErrNeverFires is returned by New when the schedule (with its start and end times and the
// calendar) has no fire time at all; Quartz refuses to schedule such a trigger too.
var ErrNeverFires = errors.New("based on its schedule, start and end times and calendar, the trigger will never fire")

// kind names the schedule kind of a Definition.
type kind int

const (
	kindNone kind = iota
	kindCron
	kindSimple
	kindCalendarInterval
	kindDailyTimeInterval
)

func (d Definition) kind() (kind, int) {
	k, n := kindNone, 0
	if d.Cron != nil {
		k, n = kindCron, n+1
	}
	if d.Simple != nil {
		k, n = kindSimple, n+1
	}
	if d.CalendarInterval != nil {
		k, n = kindCalendarInterval, n+1
	}
	if d.DailyTimeInterval != nil {
		k, n = kindDailyTimeInterval, n+1
	}
	return k, n
}

// Misfire instructions, by kind, with Quartz's codes (for reference only; the wire uses names).
var misfireCodes = map[kind]map[string]int{
	kindSimple: {
		"smart_policy": 0, "ignore_misfire_policy": -1, "fire_now": 1,
		"reschedule_now_with_existing_repeat_count":  2,
		"reschedule_now_with_remaining_repeat_count": 3,
		"reschedule_next_with_remaining_count":       4,
		"reschedule_next_with_existing_count":        5,
	},
	kindCron:              {"smart_policy": 0, "ignore_misfire_policy": -1, "fire_once_now": 1, "do_nothing": 2},
	kindCalendarInterval:  {"smart_policy": 0, "ignore_misfire_policy": -1, "fire_once_now": 1, "do_nothing": 2},
	kindDailyTimeInterval: {"smart_policy": 0, "ignore_misfire_policy": -1, "fire_once_now": 1, "do_nothing": 2},
}

// MisfireInstructions returns the misfire instruction names Validate accepts for the
// Definition's kind, with Quartz's numeric codes.
func (d Definition) MisfireInstructions() map[string]int {
	k, _ := d.kind()
	return misfireCodes[k]
}

func (d Definition) misfire() string {
	if d.Misfire == "" {
		return "smart_policy"
	}
	return d.Misfire
}

// Validate checks a Definition from a user. Errors are *FieldError with Field relative to the
// trigger object (e.g. "cron.expression", "simple.interval", "misfire").
func (d Definition) Validate() error {
	_, err := d.compile()
	return err
}

// compiled is a validated Definition in the form the computations use.
type compiled struct {
	kind     kind
	cron     *CronExpression
	loc      *time.Location
	interval time.Duration // simple
	ci       *CalendarIntervalSchedule
	unit     unit
	dti      *dailyTime
}

func (d Definition) compile() (*compiled, error) {
	k, n := d.kind()
	if n == 0 {
		return nil, fieldErr("", "a trigger needs one of cron, simple, calendarInterval or dailyTimeInterval")
	}
	if n > 1 {
		return nil, fieldErr("", "a trigger takes exactly one of cron, simple, calendarInterval or dailyTimeInterval")
	}
	if _, ok := misfireCodes[k][d.misfire()]; !ok {
		names := make([]string, 0, 8)
		for name := range misfireCodes[k] {
			names = append(names, name)
		}
		slices.Sort(names)
		return nil, fieldErr("misfire", "unknown misfire instruction %q for this trigger kind; use one of %s", d.Misfire, strings.Join(names, ", "))
	}
	if d.StartAt != nil && d.EndAt != nil && d.EndAt.Before(*d.StartAt) {
		return nil, fieldErr("endAt", "end time %s is before start time %s", d.EndAt.Format(time.RFC3339Nano), d.StartAt.Format(time.RFC3339Nano))
	}
	c := &compiled{kind: k}
	switch k {
	case kindCron:
		expr, err := cachedCron(d.Cron.Expression)
		if err != nil {
			return nil, &FieldError{Field: "cron.expression", Message: err.Error()}
		}
		loc, err := loadZone(d.Cron.TimeZone)
		if err != nil {
			return nil, fieldErr("cron.timeZone", "%v", err)
		}
		c.cron, c.loc = expr, loc
	case kindSimple:
		s := d.Simple
		if s.RepeatCount < -1 {
			return nil, fieldErr("simple.repeatCount", "must be -1 (for ever), 0 (once) or a positive number, not %d", s.RepeatCount)
		}
		if s.Interval != "" || s.RepeatCount != 0 {
			iv, err := ParseDuration(s.Interval)
			if err != nil {
				return nil, fieldErr("simple.interval", "%v", err)
			}
			if iv < time.Millisecond || iv%time.Millisecond != 0 {
				return nil, fieldErr("simple.interval", "must be a positive whole number of milliseconds, not %s", s.Interval)
			}
			c.interval = iv
		}
	case kindCalendarInterval:
		if err := compileCalendarInterval(d.CalendarInterval, c); err != nil {
			return nil, err
		}
	case kindDailyTimeInterval:
		if err := compileDailyTimeInterval(d.DailyTimeInterval, c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

var zoneCache sync.Map // string -> *time.Location

// loadZone loads an IANA zone ("" = UTC) from the system or the embedded database, cached.
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if l, ok := zoneCache.Load(name); ok {
		return l.(*time.Location), nil
	}
	if name == "Local" || strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		return nil, fmt.Errorf("unknown time zone %q; use an IANA name such as Europe/Paris", name)
	}
	l, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q; use an IANA name such as Europe/Paris", name)
	}
	zoneCache.Store(name, l)
	return l, nil
}

// cronCache keeps parsed expressions: triggers are reconstructed from stored rows all the time
// and a parse is cheap but not free. Bounded: it is emptied when it gets large.
var (
	cronCacheMu sync.Mutex
	cronCache   = map[string]*CronExpression{}
)

func cachedCron(expr string) (*CronExpression, error) {
	cronCacheMu.Lock()
	c, ok := cronCache[expr]
	cronCacheMu.Unlock()
	if ok {
		return c, nil
	}
	c, err := ParseCron(expr)
	if err != nil {
		return nil, err
	}
	cronCacheMu.Lock()
	if len(cronCache) >= 4096 {
		clear(cronCache)
	}
	cronCache[expr] = c
	cronCacheMu.Unlock()
	return c, nil
}

// ParseDuration reads a Go duration ("10s", "1h30m") or an ISO 8601 duration with days, hours,
// minutes and seconds ("PT10S", "P1DT2H", "PT0.5S"; weeks as "P2W"). Years and months are
// refused: their length varies (use a calendarInterval trigger).
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("a duration is required, e.g. \"10s\" or \"PT10S\"")
	}
	if s[0] != 'P' && s[0] != 'p' {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration such as \"10s\", \"1h30m\" or \"PT10S\"", s)
		}
		return d, nil
	}
	bad := fmt.Errorf("%q is not an ISO 8601 duration such as \"PT10S\" or \"P1DT2H\" (years and months are not allowed)", s)
	rest := strings.ToUpper(s[1:])
	inTime := false
	var total float64
	if rest == "" {
		return 0, bad
	}
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return 0, bad
			}
			inTime = true
			rest = rest[1:]
			if rest == "" {
				return 0, bad
			}
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.' || rest[i] == ',') {
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, bad
		}
		num, err := strconv.ParseFloat(strings.ReplaceAll(rest[:i], ",", "."), 64)
		if err != nil {
			return 0, bad
		}
		var unit float64
		switch d := rest[i]; {
		case !inTime && d == 'W':
			unit = float64(7 * 24 * time.Hour)
		case !inTime && d == 'D':
			unit = float64(24 * time.Hour)
		case inTime && d == 'H':
			unit = float64(time.Hour)
		case inTime && d == 'M':
			unit = float64(time.Minute)
		case inTime && d == 'S':
			unit = float64(time.Second)
		default:
			return 0, bad
		}
		total += num * unit
		rest = rest[i+1:]
	}
	if total > math.MaxInt64 {
		return 0, fmt.Errorf("%q is too long", s)
	}
	return time.Duration(math.Round(total)), nil
}

func errFmt(format string, args ...any) error { return fmt.Errorf(format, args...) }
