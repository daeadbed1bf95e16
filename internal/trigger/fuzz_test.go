package trigger

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzZones are the zones fuzz inputs pick from: no DST, northern and southern DST, a
// 30-minute DST shift, a half-hour offset, and a zone whose DST changes at midnight.
var fuzzZones = []string{"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "America/Havana"}

func fuzzZone(t *testing.T, i uint8) *time.Location {
	loc, err := time.LoadLocation(fuzzZones[int(i)%len(fuzzZones)])
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// fuzzInstant maps any int64 onto 1960..2400 so that searches are meaningful.
func fuzzInstant(v int64) time.Time {
	const lo, span = -315619200000, 13880000000000 // 1960-01-01 .. ~2400, in ms
	m := v % span
	if m < 0 {
		m += span
	}
	return time.UnixMilli(lo + m).UTC()
}

// callBudget is how long one next-fire computation may take before the fuzzer calls it a hang.
const callBudget = 2 * time.Second

func timed(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(callBudget):
		t.Fatalf("%s did not finish within %v", what, callBudget)
	}
}

// addVectorSeeds adds every expression of the cron vector files to the corpus.
func addVectorSeeds(f *testing.F, add func(expr string)) {
	for _, name := range []string{"cron-valid.jsonl", "cron-invalid.jsonl", "cron-accepted-oddities.jsonl"} {
		fh, err := os.Open(filepath.Join(vectorsDir, name))
		if err != nil {
			f.Fatal(err)
		}
		seen := map[string]bool{}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var v struct {
				Expr string `json:"expr"`
			}
			if json.Unmarshal(sc.Bytes(), &v) == nil && !seen[v.Expr] {
				seen[v.Expr] = true
				add(v.Expr)
			}
		}
		fh.Close()
	}
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"0 0 0 0W * ?", "0 0 0 ? * 9#5", "0 0 0 31W 2 ?", "0 0 0 L-30W * ?", "* * * ? * 1L", "0 0 0 1 1 ? 1970-999999999", "*/-5 * * * * ?", "0 0 0 ? * MON#+3"} {
		f.Add(s, int64(1767225600000), uint8(1))
	}
	addVectorSeeds(f, func(e string) { f.Add(e, int64(1767225600000), uint8(0)) })
	f.Fuzz(func(t *testing.T, expr string, from int64, zone uint8) {
		if len(expr) > 200 {
			return
		}
		c, err := ParseCron(expr)
		if err != nil {
			if _, ok := err.(*CronError); !ok {
				t.Fatalf("%q: error of type %T", expr, err)
			}
			return
		}
		// parse → format → parse is stable.
		c2, err := ParseCron(c.String())
		if err != nil {
			t.Fatalf("%q: String() %q does not parse: %v", expr, c.String(), err)
		}
		if c2.String() != c.String() || !c.Equal(c2) {
			t.Fatalf("%q: String() %q parses to a different expression", expr, c.String())
		}
		loc := fuzzZone(t, zone)
		at := fuzzInstant(from)
		for range 3 {
			var next time.Time
			var ok bool
			timed(t, expr, func() { next, ok = c.Next(at, loc) })
			if !ok {
				return
			}
			if !next.After(at) {
				t.Fatalf("%q in %s: Next(%s) = %s, not after", expr, loc, at, next)
			}
			if next.Nanosecond() != 0 {
				t.Fatalf("%q: Next(%s) = %s has a fraction of a second", expr, at, next)
			}
			at = next
		}
	})
}

// checkTriggerSteps creates a trigger and steps it, checking the invariants every kind must
// keep: fire times strictly increase and never pass the end time.
func checkTriggerSteps(t *testing.T, def Definition, now time.Time) {
	t.Helper()
	var tr *Trigger
	var err error
	timed(t, "New", func() { tr, err = New(def, now, nil) })
	if err != nil {
		return
	}
	prev := time.Time{}
	for i := 0; i < 5 && !tr.NextFireTime.IsZero(); i++ {
		n := tr.NextFireTime
		if !prev.IsZero() && !n.After(prev) {
			t.Fatalf("%+v: fire %d at %s not after %s", def, i, n, prev)
		}
		if def.EndAt != nil && n.After(*tr.EndAt) {
			t.Fatalf("%+v: fire %s after end %s", def, n, *tr.EndAt)
		}
		prev = n
		timed(t, "Triggered", func() { tr.Triggered(nil) })
	}
	// fireTimeAfter from an arbitrary instant is strictly after it.
	c, _ := tr.compile()
	probe := now.Add(37 * time.Hour)
	var n time.Time
	timed(t, "fireTimeAfter", func() { n = tr.fireTimeAfter(c, probe) })
	if !n.IsZero() && !n.After(probe) {
		t.Fatalf("%+v: fire time after %s is %s", def, probe, n)
	}
	timed(t, "UpdateAfterMisfire", func() { tr.UpdateAfterMisfire(nil, probe) })
}

func optEnd(start time.Time, endOffset int64) *time.Time {
	if endOffset <= 0 {
		return nil
	}
	e := start.Add(time.Duration(endOffset%(1<<40)) * time.Millisecond)
	return &e
}

func FuzzCronTrigger(f *testing.F) {
	f.Add("0 30 2 * * ?", int64(1772900000000), int64(0), uint8(1))
	f.Add("0 0/15 * * * ?", int64(1767225600000), int64(3600000), uint8(0))
	f.Add("0 0 9 ? * MON-FRI", int64(1767225600000), int64(0), uint8(2))
	f.Fuzz(func(t *testing.T, expr string, start, endOffset int64, zone uint8) {
		if len(expr) > 200 {
			return
		}
		if _, err := ParseCron(expr); err != nil {
			return
		}
		s := fuzzInstant(start)
		def := Definition{Cron: &CronSchedule{Expression: expr, TimeZone: fuzzZones[int(zone)%len(fuzzZones)]}, StartAt: &s, EndAt: optEnd(s, endOffset)}
		checkTriggerSteps(t, def, s)
	})
}

func FuzzSimpleTrigger(f *testing.F) {
	f.Add(int64(1767225600000), int64(10000), 3, int64(0))
	f.Add(int64(1767225600000), int64(1), -1, int64(5))
	f.Add(int64(1767225600000), int64(0), 0, int64(0))
	f.Fuzz(func(t *testing.T, start, intervalMs int64, repeat int, endOffset int64) {
		s := fuzzInstant(start)
		if intervalMs < 0 {
			intervalMs = -intervalMs
		}
		if intervalMs < 0 { // math.MinInt64
			return
		}
		def := Definition{Simple: &SimpleSchedule{Interval: (time.Duration(intervalMs%(1<<40)) * time.Millisecond).String(), RepeatCount: repeat}, StartAt: &s, EndAt: optEnd(s, endOffset)}
		if intervalMs == 0 {
			def.Simple.Interval = ""
		}
		checkTriggerSteps(t, def, s)
	})
}

func FuzzCalendarIntervalTrigger(f *testing.F) {
	f.Add(int64(1772865000000), 1, uint8(3), uint8(1), false, false, int64(0))
	f.Add(int64(1769853600000), 1, uint8(5), uint8(0), true, true, int64(0))
	f.Add(int64(1767225600000), 90, uint8(1), uint8(3), true, false, int64(86400000))
	f.Fuzz(func(t *testing.T, start int64, interval int, unitIdx, zone uint8, preserve, skip bool, endOffset int64) {
		units := []string{"second", "minute", "hour", "day", "week", "month", "year"}
		s := fuzzInstant(start)
		def := Definition{CalendarInterval: &CalendarIntervalSchedule{
			Interval: interval, Unit: units[int(unitIdx)%len(units)], TimeZone: fuzzZones[int(zone)%len(fuzzZones)],
			PreserveHourOfDayAcrossDaylightSavings: preserve, SkipDayIfHourDoesNotExist: skip && preserve,
		}, StartAt: &s, EndAt: optEnd(s, endOffset)}
		checkTriggerSteps(t, def, s)
	})
}

func FuzzDailyTimeIntervalTrigger(f *testing.F) {
	f.Add(int64(1763596800000), 2, uint8(2), uint8(2), uint32(9*3600), uint32(17*3600), uint8(0x3e), -1, int64(0))
	f.Add(int64(1772900000000), 30, uint8(1), uint8(1), uint32(3600), uint32(4*3600), uint8(0x7f), 5, int64(0))
	f.Fuzz(func(t *testing.T, start int64, interval int, unitIdx, zone uint8, sod, eod uint32, days uint8, repeat int, endOffset int64) {
		units := []string{"second", "minute", "hour"}
		s := fuzzInstant(start)
		tod := func(v uint32) string {
			v %= 86400
			return TimeOfDay{Hour: int(v / 3600), Minute: int(v / 60 % 60), Second: int(v % 60)}.String()
		}
		var dow DaysOfWeek
		for i := range 7 {
			if days&(1<<i) != 0 {
				dow = append(dow, i+1)
			}
		}
		def := Definition{DailyTimeInterval: &DailyTimeIntervalSchedule{
			StartTimeOfDay: tod(sod), EndTimeOfDay: tod(eod), DaysOfWeek: dow, Interval: interval,
			Unit: units[int(unitIdx)%len(units)], RepeatCount: repeat, TimeZone: fuzzZones[int(zone)%len(fuzzZones)],
		}, StartAt: &s, EndAt: optEnd(s, endOffset)}
		checkTriggerSteps(t, def, s)
	})
}

func FuzzParseCalendar(f *testing.F) {
	for _, s := range []string{
		`{"type":"weekly","days":["SAT","SUN"],"timeZone":"Europe/Paris"}`,
		`{"type":"daily","start":"09:00","end":"17:30:00.500","invert":true,"timeZone":"America/New_York","base":{"type":"holiday","dates":["2026-12-25"]}}`,
		`{"type":"cron","expression":"* * 0-7 ? * MON-FRI","timeZone":"Australia/Lord_Howe"}`,
		`{"type":"annual","days":["12-25","01-01"],"base":{"type":"monthly","days":[1,15,31]}}`,
		`{"type":"monthly","days":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31]}`,
	} {
		f.Add(s, int64(1767225600000))
	}
	f.Fuzz(func(t *testing.T, js string, at int64) {
		if len(js) > 2000 {
			return
		}
		c, err := ParseCalendar([]byte(js))
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("%s: error of type %T", js, err)
			}
			return
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("%s: marshal: %v", js, err)
		}
		c2, err := ParseCalendar(b)
		if err != nil {
			t.Fatalf("%s → %s: %v", js, b, err)
		}
		x := fuzzInstant(at)
		var inc bool
		var next time.Time
		timed(t, js, func() { inc = c.IsTimeIncluded(x); next = c.NextIncludedTime(x) })
		if inc != c2.IsTimeIncluded(x) {
			t.Fatalf("%s → %s: inclusion of %s differs", js, b, x)
		}
		if !next.IsZero() && next.Before(x) {
			t.Fatalf("%s: NextIncludedTime(%s) = %s is before it", js, x, next)
		}
		if inc && !next.Equal(x) {
			t.Fatalf("%s: %s is included but NextIncludedTime returns %s", js, x, next)
		}
	})
}
