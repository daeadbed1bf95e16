package client_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/schemas"
)

// The client's own wire types encode to bodies the contract's schemas accept: every trigger
// kind, every field of a job, and the bodies the typed methods send.
func TestClientBodiesMatchTheSchemas(t *testing.T) {
	c := jsonschema.NewCompiler()
	files, err := fs.Glob(schemas.JSON, "json/command/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no command schemas: %v", err)
	}
	for _, f := range files {
		raw, _ := fs.ReadFile(schemas.JSON, f)
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddResource("https://agate.dev/schemas/command/"+strings.TrimPrefix(f, "json/command/"), doc); err != nil {
			t.Fatal(err)
		}
	}
	check := func(cmd string, body any) {
		t.Helper()
		sch, err := c.Compile("https://agate.dev/schemas/command/" + cmd + ".json")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(body)
		inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(append([]byte(`{"id":"x",`), data[1:]...)))
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s body %s does not match its schema: %v", cmd, data, err)
		}
	}
	at, prio, repeat := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 7, 3
	job := client.Job{Group: "g", Name: "j", Type: "http", Data: map[string]any{"url": "http://x"}, Nonconcurrent: true,
		RequestsRecovery: true, Durable: true, Timeout: "5m", Description: "d", PersistData: true}
	triggers := []client.Trigger{
		client.Cron("g", "cron", "0 0 2 * * ?", "Europe/Paris"),
		client.Every("g", "every", time.Minute),
		client.OneShot("g", "once", at),
		{Group: "g", Name: "ci", CalendarInterval: &client.CalendarIntervalSchedule{Interval: 1, Unit: "month", TimeZone: "UTC",
			PreserveHourOfDayAcrossDaylightSavings: true, SkipDayIfHourDoesNotExist: true}, Misfire: "do_nothing", Priority: &prio,
			StartAt: &at, EndAt: &at, Calendar: "holidays", Data: map[string]any{"k": 1}},
		{Group: "g", Name: "dti", DailyTimeInterval: &client.DailyTimeSchedule{StartTimeOfDay: "09:00", EndTimeOfDay: "17:00",
			DaysOfWeek: []string{"MON", "FRI"}, Interval: 15, Unit: "minute", RepeatCount: &repeat, TimeZone: "UTC"}},
	}
	version := int64(2)
	check("schedule_job", client.ScheduleJob{Job: job, Triggers: triggers, Replace: true, ExpectedVersion: &version})
	check("add_job", client.AddJob{Job: job, Replace: true, ExpectedVersion: &version})
	for _, tr := range triggers {
		check("schedule_trigger", map[string]any{"job": client.Key{Group: "g", Name: "j"}, "trigger": tr})
	}
}
