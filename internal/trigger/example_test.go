package trigger_test

import (
	"fmt"
	"time"

	"github.com/agatesched/agate/internal/trigger"
)

func ExampleParseCron() {
	c, err := trigger.ParseCron("0 30 2 * * ?")
	if err != nil {
		panic(err)
	}
	ny, _ := time.LoadLocation("America/New_York")
	at := time.Date(2026, 3, 7, 12, 0, 0, 0, ny)
	for range 2 {
		at, _ = c.Next(at, ny)
		fmt.Println(trigger.FormatTime(at))
	}
	// Output:
	// 2026-03-09T02:30:00-04:00
	// 2026-03-10T02:30:00-04:00
}

func ExampleNew() {
	def := trigger.Definition{
		Simple:  &trigger.SimpleSchedule{Interval: "PT10S", RepeatCount: 2},
		Misfire: "reschedule_next_with_remaining_count",
	}
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	t, err := trigger.New(def, now, nil)
	if err != nil {
		panic(err)
	}
	for !t.NextFireTime.IsZero() {
		fmt.Println(trigger.FormatTime(t.NextFireTime), t.TimesTriggered)
		t.Triggered(nil)
	}
	// Output:
	// 2026-12-01T08:00:00Z 0
	// 2026-12-01T08:00:10Z 1
	// 2026-12-01T08:00:20Z 2
}

func ExampleParseCron_error() {
	_, err := trigger.ParseCron("0 0 12 1 * MON")
	fmt.Println(err)
	// Output:
	// day-of-week and day-of-month cannot both be specified; use '?' in one of them (day-of-week field "MON", position 11)
}
