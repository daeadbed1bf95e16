package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/devenv/testnode"
	"github.com/agatesched/agate/internal/events"
)

// The client against a real scheduler node: typed commands, results, errors matched by code
// with errors.Is, the field of a rejection, generated ids, and idempotent replay of a given id.
func TestClientCommands(t *testing.T) {
	cl := testnode.Start(t, "clienttest", nil)
	c := client.New(cl.NC, client.Options{Namespace: cl.Namespace})
	ctx := t.Context()
	job := client.Job{Group: "reports", Name: "daily", Type: "noop"}
	cmd := client.ScheduleJob{ID: "schedule-daily", Job: job,
		Triggers: []client.Trigger{client.Cron("reports", "nightly", "0 0 2 * * ?", "Europe/Paris"), client.Every("reports", "often", time.Hour)}}
	triggers, err := c.ScheduleJob(ctx, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if len(triggers) != 2 || triggers[0].NextFireTime == nil {
		t.Fatalf("scheduled %+v, want two triggers with fire times", triggers)
	}
	// The same id again answers the same; a new id for the same job is already_exists.
	if again, err := c.ScheduleJob(ctx, cmd); err != nil || len(again) != 2 || !again[0].NextFireTime.Equal(*triggers[0].NextFireTime) {
		t.Fatalf("replay: %+v, %v", again, err)
	}
	cmd.ID = ""
	_, err = c.ScheduleJob(ctx, cmd)
	var rej *client.Error
	if !errors.Is(err, client.ErrAlreadyExists) || !errors.As(err, &rej) || rej.Field != "job" {
		t.Fatalf("scheduling the job again: %v; want already_exists on field job", err)
	}

	nightly := client.Key{Group: "reports", Name: "nightly"}
	if state, err := c.PauseTrigger(ctx, nightly, nil); err != nil || state != "PAUSED" {
		t.Fatalf("pause: %q, %v", state, err)
	}
	stale := int64(1)
	if _, err := c.ResumeTrigger(ctx, nightly, &stale); !errors.Is(err, client.ErrFailedPrecondition) {
		t.Fatalf("resume at a stale version: %v; want failed_precondition", err)
	}
	if state, err := c.ResumeTrigger(ctx, nightly, nil); err != nil || state != "WAITING" {
		t.Fatalf("resume: %q, %v", state, err)
	}
	if _, err := c.PauseTrigger(ctx, client.Key{Group: "reports", Name: "missing"}, nil); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("pausing a missing trigger: %v; want not_found", err)
	}
	if n, err := c.PauseGroup(ctx, "reports"); err != nil || n != 2 {
		t.Fatalf("pause_group: %d, %v; want 2 paused", n, err)
	}
	if n, err := c.ResumeAll(ctx); err != nil || n != 2 {
		t.Fatalf("resume_all: %d, %v; want 2 resumed", n, err)
	}
	manual, err := c.TriggerJob(ctx, client.Key{Group: "reports", Name: "daily"}, map[string]any{"reason": "now"})
	if err != nil || manual.Group != "DEFAULT" {
		t.Fatalf("trigger_job: %+v, %v", manual, err)
	}
	_, err = c.ScheduleTrigger(ctx, client.Key{Group: "reports", Name: "daily"}, client.Cron("reports", "bad", "0 0 25 * * ?", ""))
	if !errors.Is(err, client.ErrInvalidArgument) || !errors.As(err, &rej) || rej.Field != "trigger.cron.expression" {
		t.Fatalf("a bad cron expression: %v; want invalid_argument on trigger.cron.expression", err)
	}
	// Queries: the job with its triggers and version, a list page by page, next fire times, the
	// log, the nodes. The trigger_job one-shot is among the job's triggers until its fire
	// deletes it.
	info, err := c.GetJob(ctx, client.Key{Group: "reports", Name: "daily"})
	var names []string
	for _, ti := range info.Triggers {
		if ti.Group != manual.Group || ti.Name != manual.Name {
			names = append(names, ti.Group+"."+ti.Name)
		}
	}
	if err != nil || info.Version != 1 || !slices.Equal(names, []string{"reports.nightly", "reports.often"}) {
		t.Fatalf("get_job: %+v, %v; want version 1 and the triggers reports.nightly and reports.often", info, err)
	}
	var seen []string
	for cursor := ""; ; {
		page, next, err := c.ListTriggers(ctx, client.TriggerFilter{Group: "reports", Page: client.Page{Cursor: cursor, Limit: 1}})
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range page {
			seen = append(seen, ti.Name)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "nightly,often" {
		t.Fatalf("listed %v page by page, want nightly,often", seen)
	}
	times, err := c.NextFireTimes(ctx, nightly, 3)
	if err != nil || len(times) != 3 || !times[0].Equal(*triggers[0].NextFireTime) {
		t.Fatalf("next_fire_times: %v, %v", times, err)
	}
	events, _, err := c.History(ctx, nightly, true, client.Page{})
	if err != nil || len(events) == 0 || events[0].Type != "agate.group.resumed" && events[0].Type != "agate.trigger.resumed" {
		t.Fatalf("history: %d events, newest %+v, %v", len(events), events, err)
	}
	if nodes, err := c.Instances(ctx); err != nil || len(nodes) != 1 || nodes[0].InstanceID != "n1" {
		t.Fatalf("instances: %+v, %v", nodes, err)
	}
	if _, err := c.GetTrigger(ctx, client.Key{Group: "reports", Name: "gone"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("get_trigger of a missing trigger: %v", err)
	}
	if err := c.DeleteJob(ctx, client.Key{Group: "reports", Name: "daily"}, nil); err != nil {
		t.Fatal(err)
	}
}

// The publisher sends many commands asynchronously on the durable subjects; each is applied once.
func TestPublisherAppliesEveryCommand(t *testing.T) {
	cl := testnode.Start(t, "clientpub", nil)
	p := client.NewPublisher(cl.JS, cl.Namespace, 64)
	var cmds []client.BatchCommand
	for i := range 300 {
		cmds = append(cmds, client.BatchCommand{Name: "schedule_job", Body: client.ScheduleJob{
			Job:      client.Job{Group: "batch", Name: fmt.Sprintf("j%03d", i), Type: "noop"},
			Triggers: []client.Trigger{client.OneShot("batch", fmt.Sprintf("t%03d", i), time.Now().Add(time.Hour))}}})
	}
	// Each applied command's outcome is a CommandAccepted event on agate.<ns>.evt.command.
	accepted := make(chan *nats.Msg, 400)
	sub, err := cl.NC.ChanSubscribe("agate."+cl.Namespace+".evt.command", accepted)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ids, err := p.Publish(t.Context(), cmds)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 300 || ids[0] == "" || ids[0] == ids[1] {
		t.Fatalf("ids %v…, want 300 distinct generated ids", ids[:2])
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	timeout := time.After(time.Minute)
	for len(want) > 0 {
		select {
		case m := <-accepted:
			bodies, _ := events.Bodies(m.Header, m.Data) // a batch of commands' outcomes share a message
			for _, body := range bodies {
				var ev struct {
					Type string `json:"type"`
					Data struct {
						CommandID string `json:"commandId"`
					} `json:"data"`
				}
				if err := json.Unmarshal(body, &ev); err == nil && ev.Type == "agate.command.accepted" {
					delete(want, ev.Data.CommandID)
				}
			}
		case <-timeout:
			t.Fatalf("%d of 300 published commands not accepted after a minute", len(want))
		}
	}
	var n int
	if err := cl.Pool.QueryRow(t.Context(), `select count(*) from triggers where sched_name = $1`, cl.Namespace).Scan(&n); err != nil || n != 300 {
		t.Fatalf("%d triggers stored (%v), want 300", n, err)
	}
}
