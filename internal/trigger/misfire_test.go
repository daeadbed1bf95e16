package trigger

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

type misfireState struct {
	Start            *string `json:"start"`
	End              *string `json:"end"`
	RepeatCount      *int    `json:"repeat_count"`
	RepeatIntervalMs *int64  `json:"repeat_interval_ms"`
	TimesTriggered   *int    `json:"times_triggered"`
	PrevFire         *string `json:"prev_fire"`
	NextFire         *string `json:"next_fire"`
	FinalFire        *string `json:"final_fire"`
}

type misfireVector struct {
	Trigger     string       `json:"trigger"`
	Schedule    string       `json:"schedule"`
	Cron        string       `json:"cron"`
	TZ          string       `json:"tz"`
	Instruction string       `json:"instruction"`
	Code        int          `json:"instruction_code"`
	Now         string       `json:"now"`
	Before      misfireState `json:"before"`
	After       misfireState `json:"after"`
}

func mustTime(t *testing.T, s *string) time.Time {
	t.Helper()
	if s == nil {
		return time.Time{}
	}
	v, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		t.Fatalf("bad time %q: %v", *s, err)
	}
	return v
}

func timePtr(v time.Time) *time.Time {
	if v.IsZero() {
		return nil
	}
	return &v
}

// fmtState renders the fields a vector's `after` lists, in a comparable form.
func fmtTimeOrNull(v time.Time) string {
	if v.IsZero() {
		return "null"
	}
	return FormatTime(v.UTC())
}

func fmtVectorTime(t *testing.T, s *string) string {
	if s == nil {
		return "null"
	}
	return FormatTime(mustTime(t, s).UTC())
}

func TestMisfireVectors(t *testing.T) {
	t.Parallel()
	vs := readVectors[misfireVector](t, "misfire.jsonl")
	agree := 0
	for i, v := range vs {
		b := v.Before
		def := Definition{
			Misfire: strings.ToLower(v.Instruction),
			StartAt: timePtr(mustTime(t, b.Start)),
			EndAt:   timePtr(mustTime(t, b.End)),
		}
		switch v.Trigger {
		case "simple":
			def.Simple = &SimpleSchedule{RepeatCount: *b.RepeatCount, Interval: fmt.Sprintf("%dms", *b.RepeatIntervalMs)}
			if *b.RepeatIntervalMs == 0 {
				def.Simple.Interval = ""
			}
		case "cron":
			def.Cron = &CronSchedule{Expression: v.Cron, TimeZone: v.TZ}
		}
		if err := def.Validate(); err != nil {
			t.Errorf("line %d: %v", i+1, err)
			continue
		}
		tr := &Trigger{Definition: def, NextFireTime: mustTime(t, b.NextFire), PreviousFireTime: mustTime(t, b.PrevFire)}
		if b.TimesTriggered != nil {
			tr.TimesTriggered = *b.TimesTriggered
		}
		if !tr.IgnoresMisfires() {
			tr.UpdateAfterMisfire(nil, mustTime(t, &v.Now))
		} else if v.Code != -1 {
			t.Errorf("line %d: IgnoresMisfires true for %s", i+1, v.Instruction)
		}
		a := v.After
		var diffs []string
		cmp := func(name, got, want string) {
			if got != want {
				diffs = append(diffs, fmt.Sprintf("%s: got %s want %s", name, got, want))
			}
		}
		cmp("start", fmtTimeOrNull(tr.start()), fmtVectorTime(t, a.Start))
		cmp("next_fire", fmtTimeOrNull(tr.NextFireTime), fmtVectorTime(t, a.NextFire))
		cmp("prev_fire", fmtTimeOrNull(tr.PreviousFireTime), fmtVectorTime(t, a.PrevFire))
		if a.End != nil || v.Trigger == "simple" {
			e, _ := tr.end()
			cmp("end", fmtTimeOrNull(e), fmtVectorTime(t, a.End))
		}
		if a.RepeatCount != nil {
			cmp("repeat_count", fmt.Sprint(tr.Simple.RepeatCount), fmt.Sprint(*a.RepeatCount))
		}
		if a.TimesTriggered != nil {
			cmp("times_triggered", fmt.Sprint(tr.TimesTriggered), fmt.Sprint(*a.TimesTriggered))
		}
		if v.Trigger == "simple" {
			f, _ := tr.FinalFireTime()
			cmp("final_fire", fmtTimeOrNull(f), fmtVectorTime(t, a.FinalFire))
		}
		if len(diffs) > 0 {
			t.Errorf("line %d (%s %s %s now=%s): %s", i+1, v.Trigger, v.Schedule, v.Instruction, v.Now, strings.Join(diffs, "; "))
			continue
		}
		agree++
	}
	t.Logf("misfire.jsonl: %d/%d agree", agree, len(vs))
}
