package command

import (
	"github.com/agatesched/agate/internal/apierr"
	"strings"
	"testing"
)

// The validator names the offending field and says what is wrong, for the cases producers hit.
func TestValidatorNamesTheField(t *testing.T) {
	v, err := newValidator()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, body, field, words string
	}{
		{"missing id", `{"job":{"group":"g","name":"n","type":"noop"}}`, "", "id"},
		{"unknown field", `{"id":"1","job":{"group":"g","name":"n","type":"noop","colour":1}}`, "job", "colour"},
		{"two schedules", `{"id":"1","job":{"group":"g","name":"n","type":"noop"},"triggers":[{"group":"g","name":"t","cron":{"expression":"* * * * * ?"},"simple":{"repeatCount":0}}]}`, "triggers[0]", ""},
		{"bad unit", `{"id":"1","job":{"group":"g","name":"n","type":"noop"},"triggers":[{"group":"g","name":"t","calendarInterval":{"interval":1,"unit":"fortnight"}}]}`, "triggers[0].calendarInterval.unit", ""},
		{"empty name", `{"id":"1","job":{"group":"g","name":"","type":"noop"}}`, "job.name", ""},
		{"member twice", `{"id":"1","job":{"group":"g","name":"n","type":"noop","name":"m"}}`, "", "duplicate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c ScheduleJob
			e := checkBody(v, []byte(tc.body), &c)
			if e == nil {
				t.Fatal("accepted")
			}
			if e.Code != CodeInvalidArgument || e.Field != tc.field || !strings.Contains(e.Message, tc.words) {
				t.Errorf("got %+v, want field %q and a message containing %q", e, tc.field, tc.words)
			}
		})
	}
	var c ScheduleJob
	body := []byte(`{"id":"1","job":{"group":"g","name":"n","type":"noop"},"triggers":[{"group":"g","name":"t","cron":{"expression":"0 0 2 * * ?","timeZone":"Asia/Shanghai"},"misfire":"fire_once_now"}]}`)
	if e := checkBody(v, body, &c); e != nil {
		t.Fatalf("valid command rejected: %v", e)
	}
	if c.Triggers[0].Cron == nil || c.Triggers[0].Cron.Expression != "0 0 2 * * ?" || c.Triggers[0].Misfire != "fire_once_now" {
		t.Errorf("decoded %+v", c.Triggers[0])
	}
}

func TestFieldPath(t *testing.T) {
	if got := apierr.FieldPath([]string{"triggers", "0", "cron", "expression"}); got != "triggers[0].cron.expression" {
		t.Errorf("got %q", got)
	}
}

// checkBody checks a schedule_job body as prepare does: parsed, then validated and decoded.
func checkBody(v *validator, body []byte, out *ScheduleJob) *Error {
	doc, err := parseBody(body)
	if err != nil {
		return invalid("", "body is not valid JSON")
	}
	return v.check("schedule_job", doc, body, out)
}
