package trigger

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// randomCron builds a valid Quartz expression from random field pieces.
func randomCron(r *rand.Rand) string {
	num := func(lo, hi int) int { return lo + r.IntN(hi-lo+1) }
	field := func(lo, hi int) string {
		switch r.IntN(6) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(num(lo, hi))
		case 2:
			a, b := num(lo, hi), num(lo, hi)
			return fmt.Sprintf("%d-%d", a, b)
		case 3:
			return fmt.Sprintf("%d/%d", num(lo, hi), num(1, (hi-lo)/2+1))
		case 4:
			return fmt.Sprintf("%d,%d,%d", num(lo, hi), num(lo, hi), num(lo, hi))
		default:
			return fmt.Sprintf("*/%d", num(1, (hi-lo)/2+1))
		}
	}
	sec, min, hour := field(0, 59), field(0, 59), field(0, 23)
	if r.IntN(2) == 0 {
		sec = "0" // keep most schedules sparse enough to cross days
	}
	var dom, dow string
	if r.IntN(2) == 0 {
		dom = []string{field(1, 31), "L", "LW", fmt.Sprintf("%dW", num(1, 31)), fmt.Sprintf("L-%d", num(0, 5))}[r.IntN(5)]
		dow = "?"
	} else {
		dom = "?"
		dow = []string{field(1, 7), "MON-FRI", fmt.Sprintf("%dL", num(1, 7)), fmt.Sprintf("%d#%d", num(1, 7), num(1, 5))}[r.IntN(4)]
	}
	return fmt.Sprintf("%s %s %s %s %s %s", sec, min, hour, dom, field(1, 12), dow)
}

var propZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"}

func randomCalendar(r *rand.Rand, depth int) string {
	tz := propZones[r.IntN(len(propZones))]
	var base string
	if depth < 2 && r.IntN(3) == 0 {
		base = `,"base":` + randomCalendar(r, depth+1)
	}
	switch r.IntN(6) {
	case 0:
		return fmt.Sprintf(`{"type":"weekly","days":[%d,%d],"timeZone":%q%s}`, 1+r.IntN(7), 1+r.IntN(7), tz, base)
	case 1:
		s := r.IntN(20)
		return fmt.Sprintf(`{"type":"daily","start":"%02d:%02d","end":"%02d:30:00.500","invert":%v,"timeZone":%q%s}`, s, r.IntN(60), s+1+r.IntN(3), r.IntN(2) == 0, tz, base)
	case 2:
		return fmt.Sprintf(`{"type":"monthly","days":[%d,%d,%d],"timeZone":%q%s}`, 1+r.IntN(31), 1+r.IntN(31), 1+r.IntN(31), tz, base)
	case 3:
		return fmt.Sprintf(`{"type":"annual","days":["%02d-%02d","12-25"],"timeZone":%q%s}`, 1+r.IntN(12), 1+r.IntN(28), tz, base)
	case 4:
		return fmt.Sprintf(`{"type":"holiday","dates":["2026-%02d-%02d","2026-12-25"],"timeZone":%q%s}`, 1+r.IntN(12), 1+r.IntN(28), tz, base)
	default:
		return fmt.Sprintf(`{"type":"cron","expression":"* * %d-%d ? * *","timeZone":%q%s}`, r.IntN(12), 12+r.IntN(12), tz, base)
	}
}

func randomDefinition(r *rand.Rand, start time.Time) Definition {
	tz := propZones[r.IntN(len(propZones))]
	d := Definition{StartAt: &start}
	if r.IntN(3) == 0 {
		e := start.Add(time.Duration(r.Int64N(int64(90 * 24 * time.Hour))))
		d.EndAt = &e
	}
	switch r.IntN(4) {
	case 0:
		d.Cron = &CronSchedule{Expression: randomCron(r), TimeZone: tz}
	case 1:
		d.Simple = &SimpleSchedule{Interval: (time.Duration(1+r.Int64N(int64(36*time.Hour/time.Millisecond))) * time.Millisecond).String(), RepeatCount: r.IntN(30) - 1}
	case 2:
		units := []string{"second", "minute", "hour", "day", "week", "month", "year"}
		u := r.IntN(len(units))
		d.CalendarInterval = &CalendarIntervalSchedule{Interval: 1 + r.IntN([]int{5000, 500, 50, 40, 6, 13, 3}[u]), Unit: units[u], TimeZone: tz,
			PreserveHourOfDayAcrossDaylightSavings: r.IntN(2) == 0}
		d.CalendarInterval.SkipDayIfHourDoesNotExist = d.CalendarInterval.PreserveHourOfDayAcrossDaylightSavings && r.IntN(2) == 0
	default:
		units := []string{"second", "minute", "hour"}
		u := r.IntN(3)
		sod := r.IntN(20 * 3600)
		eod := sod + r.IntN(86400-sod)
		tod := func(v int) string { return TimeOfDay{Hour: v / 3600, Minute: v / 60 % 60, Second: v % 60}.String() }
		var days DaysOfWeek
		for i := 1; i <= 7; i++ {
			if r.IntN(2) == 0 {
				days = append(days, i)
			}
		}
		d.DailyTimeInterval = &DailyTimeIntervalSchedule{StartTimeOfDay: tod(sod), EndTimeOfDay: tod(eod), DaysOfWeek: days,
			Interval: 1 + r.IntN([]int{7200, 300, 5}[u]), Unit: units[u], RepeatCount: r.IntN(40) - 1, TimeZone: tz}
	}
	return d
}

// TestPropertiesRandomSchedules checks, for random schedules with random calendars: fire times
// strictly increase, are never excluded by the calendar, never pass the end time, and previews
// agree with stepping the trigger.
func TestPropertiesRandomSchedules(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(2026, 11))
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	created := 0
	for i := range 600 {
		start := base.Add(time.Duration(r.Int64N(int64(2 * 365 * 24 * time.Hour)))).Truncate(time.Millisecond)
		def := randomDefinition(r, start)
		var cal Calendar
		calJSON := ""
		if r.IntN(2) == 0 {
			calJSON = randomCalendar(r, 0)
			var err error
			if cal, err = ParseCalendar([]byte(calJSON)); err != nil {
				t.Fatalf("case %d: calendar %s: %v", i, calJSON, err)
			}
		}
		if err := def.Validate(); err != nil {
			t.Fatalf("case %d: generated an invalid definition %+v: %v", i, def, err)
		}
		tr, err := New(def, start, cal)
		if errors.Is(err, ErrNeverFires) {
			continue
		}
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		created++
		desc := func() string {
			b, _ := json.Marshal(def)
			return fmt.Sprintf("case %d %s cal=%s", i, b, calJSON)
		}
		preview := tr.FireTimes(start.Add(-time.Millisecond), 40, cal)
		var fired []time.Time
		for range 40 {
			if tr.NextFireTime.IsZero() {
				break
			}
			n := tr.NextFireTime
			if len(fired) > 0 && !n.After(fired[len(fired)-1]) {
				t.Fatalf("%s: fire %s not after %s", desc(), n, fired[len(fired)-1])
			}
			if cal != nil && !cal.IsTimeIncluded(n) {
				t.Fatalf("%s: fire %s is excluded by the calendar", desc(), n)
			}
			if def.EndAt != nil && n.After(*def.EndAt) {
				t.Fatalf("%s: fire %s after end %s", desc(), n, *def.EndAt)
			}
			if n.Before(start) {
				t.Fatalf("%s: fire %s before start", desc(), n)
			}
			fired = append(fired, n)
			tr.Triggered(cal)
		}
		if len(preview) != len(fired) {
			t.Fatalf("%s: preview has %d times, stepping gave %d", desc(), len(preview), len(fired))
		}
		for k := range fired {
			if !preview[k].Equal(fired[k]) {
				t.Fatalf("%s: preview[%d] = %s, stepping gave %s", desc(), k, preview[k], fired[k])
			}
		}
	}
	if created < 300 {
		t.Errorf("only %d of 600 random schedules could be created", created)
	}
	t.Logf("%d random schedules checked", created)
}

// TestPropertySimpleFiresRepeatCountPlusOne: without end time or calendar a simple trigger
// fires exactly repeatCount+1 times.
func TestPropertySimpleFiresRepeatCountPlusOne(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 7))
	for range 500 {
		start := time.UnixMilli(1767225600000 + r.Int64N(1e11)).UTC()
		rc := r.IntN(60)
		iv := time.Duration(1+r.Int64N(int64(48*time.Hour/time.Millisecond))) * time.Millisecond
		tr, err := New(Definition{Simple: &SimpleSchedule{Interval: iv.String(), RepeatCount: rc}, StartAt: &start}, start, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for !tr.NextFireTime.IsZero() && n < rc+10 {
			want := start.Add(time.Duration(n) * iv)
			if !tr.NextFireTime.Equal(want) {
				t.Fatalf("rc=%d iv=%s: fire %d at %s, want %s", rc, iv, n, tr.NextFireTime, want)
			}
			n++
			tr.Triggered(nil)
		}
		if n != rc+1 {
			t.Fatalf("repeatCount %d interval %s: fired %d times", rc, iv, n)
		}
		if tr.TimesTriggered != rc+1 {
			t.Fatalf("TimesTriggered %d", tr.TimesTriggered)
		}
	}
}

// TestPropertyCalendarJSONRoundTrip: a parsed calendar written back and parsed again includes
// the same times.
func TestPropertyCalendarJSONRoundTrip(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for range 120 {
		src := randomCalendar(r, 0)
		c1, err := ParseCalendar([]byte(src))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		b, err := json.Marshal(c1)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		c2, err := ParseCalendar(b)
		if err != nil {
			t.Fatalf("%s → %s: %v", src, b, err)
		}
		for range 20 {
			at := time.UnixMilli(1767225600000 + r.Int64N(4e10))
			if c1.IsTimeIncluded(at) != c2.IsTimeIncluded(at) {
				t.Fatalf("%s → %s differ at %s", src, b, at)
			}
			n1, n2 := c1.NextIncludedTime(at), c2.NextIncludedTime(at)
			if !n1.Equal(n2) {
				t.Fatalf("%s: NextIncludedTime differs", src)
			}
			if !n1.IsZero() && n1.Before(at) {
				t.Fatalf("%s: NextIncludedTime(%s) = %s is before it", src, at, n1)
			}
		}
	}
}
