package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestFlagWinsOverEnv(t *testing.T) {
	t.Setenv("AGATE_NAMESPACE", "from-env")
	t.Setenv("AGATE_CONCURRENCY", "7")
	t.Setenv("NATS_URL", "nats://env:4222")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--namespace", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"namespace":   "from-flag",
		"concurrency": "7",
		"nats-url":    "nats://env:4222",
		"max-deliver": "5",
	} {
		if got := cmd.Flags().Lookup(flag).Value.String(); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}

	t.Setenv("AGATE_ACK_WAIT", "soon")
	if err := applyEnv(newCommand().Flags()); err == nil {
		t.Error("AGATE_ACK_WAIT=soon was accepted")
	}
}

func TestRedact(t *testing.T) {
	got := redact("nats://alice:secret@a:4222, nats://b:4222")
	if got != "nats://redacted@a:4222, nats://b:4222" {
		t.Errorf("redact = %q", got)
	}
}

// TestWorkerRunsAJob wires the worker as main does, runs a noop job through it and stops it.
func TestWorkerRunsAJob(t *testing.T) {
	url, ns := testenv.NATS(t), testenv.Namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, options{
			natsURL: url, namespace: ns, instanceID: "cmd-test", concurrency: 2, maxDeliver: 2,
			ackWait: 2 * time.Second, jobTimeout: time.Minute, drainTimeout: 5 * time.Second,
		}, slog.New(slog.DiscardHandler))
	}()

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	sub, err := nc.SubscribeSync(events.Subjects(ns).Done("noop"))
	if err != nil {
		t.Fatal(err)
	}
	f := events.JobFired{FireID: uuid.Must(uuid.NewV7()), Job: events.JobRef{Group: "g", Name: "n", Type: "noop"},
		Data: json.RawMessage(`{}`), ScheduledTime: time.Now().UTC()}
	ev, err := events.New(events.TypeJobFired, events.Source(ns, "test"), events.AggregateJob, "g.n",
		events.Subjects(ns).Fired("noop"), time.Now(), f)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.Message(ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no outcome: %v", err)
	}
	var res events.JobResult
	envl, err := events.Decode(m.Data, &res)
	if err != nil || envl.Type != events.TypeJobCompleted || res.FireID != f.FireID || res.Worker != "cmd-test" {
		t.Fatalf("outcome %s %+v (%v); want JobCompleted of fire %s by cmd-test", envl.Type, res, err, f.FireID)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runWorker returned %v after cancel, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("runWorker did not stop")
	}
}
