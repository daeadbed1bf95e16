package trigger

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ptr[T any](v T) *T { return &v }

// fireSeq creates a trigger and returns its first n fire times, formatted in zone.
func fireSeq(t *testing.T, def Definition, now string, cal Calendar, n int, zone string) []string {
	t.Helper()
	tr, err := New(def, mustParse(t, now), cal)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := 0; i < n && !tr.NextFireTime.IsZero(); i++ {
		out = append(out, FormatTime(tr.NextFireTime.In(loc)))
		tr.Triggered(cal)
	}
	return out
}

func checkSeq(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("fire times:\n got  %v\n want %v", got, want)
	}
}

func TestSimpleTrigger(t *testing.T) {
	def := Definition{Simple: &SimpleSchedule{Interval: "PT10S", RepeatCount: 3}, StartAt: ptr(mustParse(t, "2026-03-01T00:00:00.250Z"))}
	got := fireSeq(t, def, "2026-01-01T00:00:00Z", nil, 10, "UTC")
	checkSeq(t, got, "2026-03-01T00:00:00.250Z", "2026-03-01T00:00:10.250Z", "2026-03-01T00:00:20.250Z", "2026-03-01T00:00:30.250Z")

	// One-shot, StartAt defaulting to now (milliseconds kept, as Quartz).
	tr, err := New(Definition{Simple: &SimpleSchedule{}}, mustParse(t, "2026-05-05T10:00:00.123456Z"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := FormatTime(tr.NextFireTime); got != "2026-05-05T10:00:00.123Z" {
		t.Errorf("one-shot first fire %s", got)
	}
	if tr.StartAt == nil || !tr.StartAt.Equal(tr.NextFireTime) {
		t.Errorf("StartAt not stored: %v", tr.StartAt)
	}
	tr.Triggered(nil)
	if !tr.NextFireTime.IsZero() || tr.TimesTriggered != 1 || tr.PreviousFireTime.IsZero() {
		t.Errorf("after one-shot fire: %+v", tr)
	}
}

func TestCronTriggerStartTruncatedAndEnd(t *testing.T) {
	def := Definition{
		Cron:    &CronSchedule{Expression: "0 30 2 * * ?", TimeZone: "America/New_York"},
		StartAt: ptr(mustParse(t, "2026-03-07T07:30:00.900Z")), // 02:30:00.900 EST: truncated to 02:30:00, which fires
		EndAt:   ptr(mustParse(t, "2026-03-10T06:00:00Z")),
	}
	got := fireSeq(t, def, "2026-01-01T00:00:00Z", nil, 10, "America/New_York")
	// 2026-03-08 02:30 does not exist in New York: skipped, as Quartz does.
	checkSeq(t, got, "2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00")
}

func TestCronTriggerWithWeeklyCalendar(t *testing.T) {
	cal, err := ParseCalendar([]byte(`{"type":"weekly","days":["SAT","SUN"],"timeZone":"Europe/Paris"}`))
	if err != nil {
		t.Fatal(err)
	}
	def := Definition{Cron: &CronSchedule{Expression: "0 0 12 * * ?", TimeZone: "Europe/Paris"}}
	got := fireSeq(t, def, "2026-11-20T00:00:00Z", cal, 4, "Europe/Paris")
	checkSeq(t, got, "2026-11-20T12:00:00+01:00", "2026-11-23T12:00:00+01:00", "2026-11-24T12:00:00+01:00", "2026-11-25T12:00:00+01:00")
}

func TestCalendarIntervalTrigger(t *testing.T) {
	ny := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 1, Unit: "day", TimeZone: "America/New_York"}, StartAt: ptr(mustParse(t, "2026-03-07T14:30:00Z"))}
	checkSeq(t, fireSeq(t, ny, "2026-01-01T00:00:00Z", nil, 3, "America/New_York"),
		"2026-03-07T09:30:00-05:00", "2026-03-08T09:30:00-04:00", "2026-03-09T09:30:00-04:00")

	monthly := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 1, Unit: "month"}, StartAt: ptr(mustParse(t, "2026-01-31T10:00:00Z"))}
	// Quartz adds months cumulatively, so the day pinned in February stays pinned.
	checkSeq(t, fireSeq(t, monthly, "2026-01-01T00:00:00Z", nil, 4, "UTC"),
		"2026-01-31T10:00:00Z", "2026-02-28T10:00:00Z", "2026-03-28T10:00:00Z", "2026-04-28T10:00:00Z")

	// 02:30 does not exist on 2026-03-08 in New York.
	gap := func(preserve, skip bool) []string {
		d := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 1, Unit: "day", TimeZone: "America/New_York",
			PreserveHourOfDayAcrossDaylightSavings: preserve, SkipDayIfHourDoesNotExist: skip}, StartAt: ptr(mustParse(t, "2026-03-07T07:30:00Z"))}
		return fireSeq(t, d, "2026-01-01T00:00:00Z", nil, 3, "America/New_York")
	}
	checkSeq(t, gap(false, false), "2026-03-07T02:30:00-05:00", "2026-03-08T01:30:00-05:00", "2026-03-09T01:30:00-04:00")
	checkSeq(t, gap(true, false), "2026-03-07T02:30:00-05:00", "2026-03-08T03:30:00-04:00", "2026-03-09T02:30:00-04:00")
	checkSeq(t, gap(true, true), "2026-03-07T02:30:00-05:00", "2026-03-09T02:30:00-04:00", "2026-03-10T02:30:00-04:00")

	every90m := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 90, Unit: "minute"}, StartAt: ptr(mustParse(t, "2026-01-01T00:00:00Z")), EndAt: ptr(mustParse(t, "2026-01-01T03:00:00Z"))}
	checkSeq(t, fireSeq(t, every90m, "2026-01-01T00:00:00Z", nil, 10, "UTC"), "2026-01-01T00:00:00Z", "2026-01-01T01:30:00Z")
	tr, _ := New(every90m, mustParse(t, "2026-01-01T00:00:00Z"), nil)
	// Quartz reports the end time itself when it falls on the schedule, although a fire time
	// equal to the end time is not fired.
	if f, ok := tr.FinalFireTime(); !ok || FormatTime(f) != "2026-01-01T03:00:00Z" {
		t.Errorf("final fire %v %v", f, ok)
	}
}

func TestDailyTimeIntervalTrigger(t *testing.T) {
	def := Definition{DailyTimeInterval: &DailyTimeIntervalSchedule{
		StartTimeOfDay: "09:00", EndTimeOfDay: "17:00:00", DaysOfWeek: DaysOfWeek{2, 3, 4, 5, 6},
		Interval: 2, Unit: "hour", RepeatCount: -1, TimeZone: "Europe/Paris"}}
	checkSeq(t, fireSeq(t, def, "2026-11-20T00:00:00Z", nil, 7, "Europe/Paris"),
		"2026-11-20T09:00:00+01:00", "2026-11-20T11:00:00+01:00", "2026-11-20T13:00:00+01:00",
		"2026-11-20T15:00:00+01:00", "2026-11-20T17:00:00+01:00", "2026-11-23T09:00:00+01:00", "2026-11-23T11:00:00+01:00")

	def.DailyTimeInterval.RepeatCount = 2
	checkSeq(t, fireSeq(t, def, "2026-11-20T00:00:00Z", nil, 7, "Europe/Paris"),
		"2026-11-20T09:00:00+01:00", "2026-11-20T11:00:00+01:00", "2026-11-20T13:00:00+01:00")

	// JSON: absent repeatCount means no limit; days by name or Quartz number.
	var d Definition
	if err := json.Unmarshal([]byte(`{"dailyTimeInterval":{"startTimeOfDay":"08:00:00","daysOfWeek":["mon",3],"interval":30,"unit":"minute"}}`), &d); err != nil {
		t.Fatal(err)
	}
	if d.DailyTimeInterval.RepeatCount != -1 || !reflect.DeepEqual(d.DailyTimeInterval.DaysOfWeek, DaysOfWeek{2, 3}) {
		t.Errorf("decoded %+v", d.DailyTimeInterval)
	}
}

func TestDefinitionJSONRoundTrip(t *testing.T) {
	in := `{"cron":{"expression":"0 0 2 * * ?","timeZone":"Asia/Shanghai"},"misfire":"fire_once_now","startAt":"2026-12-01T00:00:00Z"}`
	var d Definition
	if err := json.Unmarshal([]byte(in), &d); err != nil {
		t.Fatal(err)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var d2 Definition
	if err := json.Unmarshal(out, &d2); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, d2) {
		t.Errorf("round trip changed it:\n%+v\n%+v", d, d2)
	}
	for _, s := range []string{
		`{"simple":{"interval":"10s","repeatCount":-1}}`,
		`{"calendarInterval":{"interval":2,"unit":"week","timeZone":"Europe/Paris","preserveHourOfDayAcrossDaylightSavings":true}}`,
		`{"dailyTimeInterval":{"startTimeOfDay":"09:00:00","endTimeOfDay":"17:00:00","daysOfWeek":["MON","FRI"],"interval":15,"unit":"minute","repeatCount":-1,"timeZone":"UTC"}}`,
	} {
		var a, b Definition
		if err := json.Unmarshal([]byte(s), &a); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if err := a.Validate(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
		m, _ := json.Marshal(a)
		if err := json.Unmarshal(m, &b); err != nil || !reflect.DeepEqual(a, b) {
			t.Errorf("%s: round trip %s: %v", s, m, err)
		}
	}
}

func TestValidateErrors(t *testing.T) {
	cases := []struct {
		json, field, contains string
	}{
		{`{"cron":{"expression":"0 0 12 1 * MON"}}`, "cron.expression", "day-of-week and day-of-month cannot both be specified; use '?' in one of them (day-of-week field \"MON\", position 11)"},
		{`{"cron":{"expression":"0 0 12 * * ?","timeZone":"Mars/Olympus"}}`, "cron.timeZone", "unknown time zone"},
		{`{"simple":{"interval":"soon","repeatCount":3}}`, "simple.interval", "not a duration"},
		{`{"simple":{"repeatCount":3}}`, "simple.interval", "required"},
		{`{"simple":{"interval":"10s","repeatCount":-2}}`, "simple.repeatCount", "-1"},
		{`{"simple":{"interval":"10s","repeatCount":1},"misfire":"do_nothing"}`, "misfire", "reschedule_next_with_existing_count"},
		{`{"cron":{"expression":"0 0 12 * * ?"},"misfire":"fire_now"}`, "misfire", "fire_once_now"},
		{`{"calendarInterval":{"interval":0,"unit":"day"}}`, "calendarInterval.interval", "positive"},
		{`{"calendarInterval":{"interval":1,"unit":"fortnight"}}`, "calendarInterval.unit", "unknown unit"},
		{`{"dailyTimeInterval":{"interval":1,"unit":"day"}}`, "dailyTimeInterval.unit", "second, minute or hour"},
		{`{"dailyTimeInterval":{"interval":1,"unit":"hour","startTimeOfDay":"18:00","endTimeOfDay":"09:00"}}`, "dailyTimeInterval.endTimeOfDay", "before"},
		{`{}`, "", "one of cron, simple"},
		{`{"cron":{"expression":"* * * * * ?"},"simple":{"repeatCount":0}}`, "", "exactly one"},
		{`{"simple":{"repeatCount":0},"startAt":"2026-01-02T00:00:00Z","endAt":"2026-01-01T00:00:00Z"}`, "endAt", "before start"},
	}
	for _, c := range cases {
		var d Definition
		if err := json.Unmarshal([]byte(c.json), &d); err != nil {
			t.Fatalf("%s: %v", c.json, err)
		}
		err := d.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: got %v, want a *FieldError", c.json, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(fe.Message, c.contains) {
			t.Errorf("%s: got %q / %q, want field %q containing %q", c.json, fe.Field, fe.Message, c.field, c.contains)
		}
	}
}

func TestNewNeverFires(t *testing.T) {
	_, err := New(Definition{Cron: &CronSchedule{Expression: "0 0 0 1 1 ? 2020"}}, mustParse(t, "2026-01-01T00:00:00Z"), nil)
	if !errors.Is(err, ErrNeverFires) {
		t.Errorf("got %v, want ErrNeverFires", err)
	}
}

func TestFireTimesPreview(t *testing.T) {
	tr, err := New(Definition{Cron: &CronSchedule{Expression: "0 0/15 * * * ?"}}, mustParse(t, "2026-01-01T00:00:00Z"), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := tr.FireTimes(mustParse(t, "2026-06-01T10:07:00Z"), 3, nil)
	var s []string
	for _, g := range got {
		s = append(s, FormatTime(g))
	}
	checkSeq(t, s, "2026-06-01T10:15:00Z", "2026-06-01T10:30:00Z", "2026-06-01T10:45:00Z")
	between := tr.FireTimesBetween(mustParse(t, "2026-06-01T10:00:00Z"), mustParse(t, "2026-06-01T11:00:00Z"), 100, nil)
	if len(between) != 4 || FormatTime(between[3]) != "2026-06-01T11:00:00Z" {
		t.Errorf("between: %v", between)
	}
	if tr.NextFireTime != mustParse(t, "2026-01-01T00:00:00Z") {
		t.Errorf("preview changed the trigger: %v", tr.NextFireTime)
	}
}

func TestMisfireCalendarAndDailyKinds(t *testing.T) {
	now := mustParse(t, "2026-03-10T10:07:30.250Z")
	for _, c := range []struct {
		name, misfire, want string
	}{
		{"smart", "", "2026-03-10T10:07:30.250Z"},
		{"fire_once_now", "fire_once_now", "2026-03-10T10:07:30.250Z"},
		{"do_nothing", "do_nothing", "2026-03-11T09:00:00Z"},
		{"ignore", "ignore_misfire_policy", "2026-03-09T09:00:00Z"},
	} {
		ci := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 1, Unit: "day"}, Misfire: c.misfire, StartAt: ptr(mustParse(t, "2026-03-09T09:00:00Z"))}
		dti := Definition{DailyTimeInterval: &DailyTimeIntervalSchedule{StartTimeOfDay: "09:00", EndTimeOfDay: "09:00", Interval: 1, Unit: "hour", RepeatCount: -1}, Misfire: c.misfire, StartAt: ptr(mustParse(t, "2026-03-09T08:00:00Z"))}
		for _, def := range []Definition{ci, dti} {
			tr, err := New(def, mustParse(t, "2026-03-01T00:00:00Z"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tr.IgnoresMisfires() {
				tr.UpdateAfterMisfire(nil, now)
			}
			if got := FormatTime(tr.NextFireTime); got != c.want {
				t.Errorf("%s %+v: next %s, want %s", c.name, def, got, c.want)
			}
		}
	}
	// An unknown instruction for the kind is refused.
	err := Definition{CalendarInterval: &CalendarIntervalSchedule{Interval: 1, Unit: "day"}, Misfire: "fire_now"}.Validate()
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "misfire" {
		t.Errorf("got %v", err)
	}
}

func TestRestoreRoundTrip(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	orig, err := New(Definition{Simple: &SimpleSchedule{Interval: "10s", RepeatCount: -1}, StartAt: &start}, start, nil)
	if err != nil {
		t.Fatal(err)
	}
	orig.Triggered(nil)
	schedule, err := json.Marshal(orig.Definition)
	if err != nil {
		t.Fatal(err)
	}
	next, prev := orig.NextFireTime, orig.PreviousFireTime
	got, err := Restore(schedule, &next, &prev, orig.TimesTriggered)
	if err != nil {
		t.Fatal(err)
	}
	got.Triggered(nil)
	orig.Triggered(nil)
	if !got.NextFireTime.Equal(orig.NextFireTime) || got.TimesTriggered != orig.TimesTriggered {
		t.Fatalf("restored trigger fires at %v (%d times), the original at %v (%d)", got.NextFireTime, got.TimesTriggered,
			orig.NextFireTime, orig.TimesTriggered)
	}
	if _, err := Restore([]byte(`{"simple":`), nil, nil, 0); err == nil {
		t.Fatal("an unreadable schedule was restored")
	}
}

// Quartz's updateWithNewCalendar: the next fire after the previous one that the new calendar
// includes, stepping over the ones more than the misfire threshold in the past; after now for a
// trigger that never fired; without a calendar, simply the fire after the previous one.
func TestUpdateWithNewCalendar(t *testing.T) {
	cal, err := ParseCalendar([]byte(`{"type":"daily","start":"09:00","end":"12:30","timeZone":"UTC"}`))
	if err != nil {
		t.Fatal(err)
	}
	short, err := ParseCalendar([]byte(`{"type":"daily","start":"09:00","end":"09:30","timeZone":"UTC"}`))
	if err != nil {
		t.Fatal(err)
	}
	hourly := Definition{StartAt: ptr(mustParse(t, "2026-11-20T06:00:00Z")), Simple: &SimpleSchedule{Interval: "1h", RepeatCount: -1}}
	for _, c := range []struct {
		name, prev, now string
		cal             Calendar
		want            string
	}{
		{"excluded hours skipped", "2026-11-20T08:00:00Z", "2026-11-20T08:30:00Z", cal, "2026-11-20T13:00:00Z"},
		{"a past fire beyond the threshold skipped", "2026-11-20T08:00:00Z", "2026-11-20T10:30:00Z", short, "2026-11-20T11:00:00Z"},
		{"a past fire within the threshold kept", "2026-11-20T08:00:00Z", "2026-11-20T10:00:30Z", short, "2026-11-20T10:00:00Z"},
		{"never fired: after now", "", "2026-11-20T13:30:00Z", cal, "2026-11-20T14:00:00Z"},
		{"no calendar: the fire after the previous one", "2026-11-20T07:00:00Z", "2026-11-20T10:30:00Z", nil, "2026-11-20T08:00:00Z"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := &Trigger{Definition: hourly, NextFireTime: mustParse(t, "2026-11-20T09:00:00Z")}
			if c.prev != "" {
				tr.PreviousFireTime, tr.TimesTriggered = mustParse(t, c.prev), 1
			}
			tr.UpdateWithNewCalendar(c.cal, mustParse(t, c.now), time.Minute)
			if got := tr.NextFireTime.UTC().Format(time.RFC3339); got != c.want {
				t.Errorf("next fire %s, want %s", got, c.want)
			}
		})
	}
}

// ScheduledAtOrAfter answers from the schedule alone, for times before the trigger's state:
// a fire time is itself, another time gives the next one, and nothing before start or past the
// repeat count is a fire time.
func TestScheduledAtOrAfter(t *testing.T) {
	start := mustParse(t, "2026-03-01T10:00:00.250Z")
	now := mustParse(t, "2026-03-05T00:00:00Z")
	cron, err := New(Definition{Cron: &CronSchedule{Expression: "0 0 * * * ?"}, StartAt: &start}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	simple, err := New(Definition{Simple: &SimpleSchedule{Interval: "90m", RepeatCount: 2}, StartAt: &start}, now, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tr   *Trigger
		at   string
		want string // "" for none
	}{
		{"cron on the hour", cron, "2026-03-02T07:00:00Z", "2026-03-02T07:00:00Z"},
		{"cron between hours", cron, "2026-03-02T07:30:00Z", "2026-03-02T08:00:00Z"},
		{"cron before start (its start truncated to the second, as Quartz does)", cron, "2026-02-01T00:00:00Z", "2026-03-01T10:00:00Z"},
		{"simple at start", simple, "2026-03-01T10:00:00.25Z", "2026-03-01T10:00:00.25Z"},
		{"simple on its grid", simple, "2026-03-01T11:30:00.25Z", "2026-03-01T11:30:00.25Z"},
		{"simple off its grid", simple, "2026-03-01T11:00:00Z", "2026-03-01T11:30:00.25Z"},
		{"simple past its repeat count", simple, "2026-03-01T13:00:01Z", ""},
	} {
		got := c.tr.ScheduledAtOrAfter(mustParse(t, c.at))
		if (c.want == "" && !got.IsZero()) || (c.want != "" && !got.Equal(mustParse(t, c.want))) {
			t.Errorf("%s: ScheduledAtOrAfter(%s) = %v, want %q", c.name, c.at, got, c.want)
		}
	}
}
