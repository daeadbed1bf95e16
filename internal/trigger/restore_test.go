package trigger

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// storedSchedules are schedules as PostgreSQL's jsonb gives them back (keys sorted, a space after
// each colon and comma), one of each kind with every member set.
var storedSchedules = []string{
	`{"simple": {"interval": "10s", "repeatCount": -1}, "startAt": "2026-01-01T00:00:00Z"}`,
	`{"simple": {"repeatCount": 0}, "startAt": "2026-11-27T23:59:59.123456789+01:00", "misfire": "fire_now"}`,
	`{"cron": {"timeZone": "Europe/Paris", "expression": "0 0/15 9-17 ? * MON-FRI"}, "endAt": "2027-01-01T00:00:00Z", "misfire": "do_nothing", "startAt": "2026-01-01T00:00:00Z"}`,
	`{"startAt": "2026-03-01T02:30:00Z", "calendarInterval": {"unit": "month", "interval": 1, "timeZone": "America/New_York", "skipDayIfHourDoesNotExist": true, "preserveHourOfDayAcrossDaylightSavings": true}}`,
	`{"startAt": "2026-01-01T00:00:00Z", "dailyTimeInterval": {"end": "17:00", "unit": "minute", "start": "09:00", "interval": 30, "timeZone": "Asia/Tokyo", "daysOfWeek": ["MON", "WED"], "repeatCount": 5}}`,
	`{"startAt": "2026-01-01T00:00:00Z", "dailyTimeInterval": {"unit": "hour", "interval": 2, "daysOfWeek": [2, 4]}}`,
}

// Restore reads with encoding/json/v2; what it restores is what encoding/json read from the same
// stored schedules, and it refuses what encoding/json refuses.
func TestRestoreReadsAsEncodingJSON(t *testing.T) {
	next := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, s := range storedSchedules {
		var want Definition
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("encoding/json: %s: %v", s, err)
		}
		got, err := Restore([]byte(s), &next, nil, 3)
		if err != nil {
			t.Fatalf("Restore(%s): %v", s, err)
		}
		if !reflect.DeepEqual(got.Definition, want) {
			t.Errorf("Restore(%s) = %+v, encoding/json read %+v", s, got.Definition, want)
		}
		if !got.NextFireTime.Equal(next) || !got.PreviousFireTime.IsZero() || got.TimesTriggered != 3 {
			t.Errorf("Restore(%s): next %v, previous %v, %d times", s, got.NextFireTime, got.PreviousFireTime, got.TimesTriggered)
		}
	}
	for _, s := range []string{`{"simple":`, `[]`, `{"simple": {"repeatCount": "1"}}`, `{"startAt": "yesterday"}`,
		`{"dailyTimeInterval": {"daysOfWeek": ["SOMEDAY"]}}`} {
		if _, err := Restore([]byte(s), nil, nil, 0); err == nil {
			t.Errorf("Restore(%s) read an unreadable schedule", s)
		}
	}
}

func BenchmarkRestore(b *testing.B) {
	schedule := []byte(storedSchedules[1]) // a one-shot: the burst's
	next := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Restore(schedule, &next, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}
