package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/devenv/testnode"
)

// exampleCluster is a scheduler node of namespace "examples" that the examples share, started
// on first use and stopped when the test binary ends.
var exampleCluster = sync.OnceValue(func() *testnode.Node { return testnode.Start(testenv.Process(), "examples", nil) })

// Schedule a job with a cron trigger and read its first fire time.
func Example() {
	ctx := context.Background()
	c := client.New(exampleCluster().NC, client.Options{Namespace: "examples"})
	triggers, err := c.ScheduleJob(ctx, client.ScheduleJob{
		Job:      client.Job{Group: "reports", Name: "daily-stats", Type: "noop", Nonconcurrent: true},
		Triggers: []client.Trigger{client.Cron("reports", "nightly", "0 0 2 * * ?", "Europe/Paris")},
	})
	if err != nil {
		fmt.Println("rejected:", err)
		return
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	fmt.Println(triggers[0].Name, "fires next at", triggers[0].NextFireTime.In(paris).Format("15:04"))
	// Output: nightly fires next at 02:00
}

// A rejection carries the contract's code, which errors.Is matches, and the field it is about.
func ExampleError() {
	ctx := context.Background()
	c := client.New(exampleCluster().NC, client.Options{Namespace: "examples"})
	_, err := c.ScheduleJob(ctx, client.ScheduleJob{
		Job:      client.Job{Group: "reports", Name: "broken", Type: "noop"},
		Triggers: []client.Trigger{client.Cron("reports", "broken", "0 0 25 * * ?", "")},
	})
	var rej *client.Error
	if errors.Is(err, client.ErrInvalidArgument) && errors.As(err, &rej) {
		fmt.Println(rej.Field)
	}
	_, err = c.PauseTrigger(ctx, client.Key{Group: "reports", Name: "no-such-trigger"}, nil)
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// triggers[0].cron.expression
	// true
}

// Pause a whole group, add a trigger to it (it starts paused, as in Quartz), and resume it.
func ExampleClient_PauseGroup() {
	ctx := context.Background()
	c := client.New(exampleCluster().NC, client.Options{Namespace: "examples"})
	if _, err := c.PauseGroup(ctx, "billing"); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := c.ScheduleJob(ctx, client.ScheduleJob{
		Job:      client.Job{Group: "billing", Name: "invoices", Type: "noop"},
		Triggers: []client.Trigger{client.Every("billing", "hourly", time.Hour)},
	}); err != nil {
		fmt.Println(err)
		return
	}
	state, _ := c.ResumeTrigger(ctx, client.Key{Group: "billing", Name: "hourly"}, nil)
	fmt.Println(state)
	// Output: WAITING
}

// Publish many commands at once; each is stored by JetStream and applied once.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	p := client.NewPublisher(exampleCluster().JS, "examples", 256)
	var cmds []client.BatchCommand
	for i := range 100 {
		cmds = append(cmds, client.BatchCommand{Name: "schedule_job", Body: client.ScheduleJob{
			Job:      client.Job{Group: "bulk", Name: fmt.Sprint("job-", i), Type: "noop"},
			Triggers: []client.Trigger{client.OneShot("bulk", fmt.Sprint("once-", i), time.Now().Add(time.Hour))},
		}})
	}
	ids, err := p.Publish(ctx, cmds)
	fmt.Println(len(ids), err)
	// Output: 100 <nil>
}

// Follow a job's events as they happen: here the scheduling of its trigger. Events returns once
// it reads, so nothing published after it is missed; without Follow it reads what is stored.
func ExampleClient_Events() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := client.New(exampleCluster().NC, client.Options{Namespace: "examples"})
	job := client.Key{Group: "audit", Name: "export"}
	events, err := c.Events(ctx, client.EventsOptions{Follow: true, NewOnly: true, Job: &job, Types: []string{"trigger.scheduled"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer events.Close()
	if _, err := c.ScheduleJob(ctx, client.ScheduleJob{
		Job:      client.Job{Group: job.Group, Name: job.Name, Type: "noop"},
		Triggers: []client.Trigger{client.Cron("audit", "weekly", "0 0 3 ? * MON", "UTC")},
	}); err != nil {
		fmt.Println(err)
		return
	}
	for ev, err := range events.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ev.Type, ev.Subject)
		break
	}
	// Output: agate.trigger.scheduled audit.weekly
}
