package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
)

func TestMain(m *testing.M) {
	if os.Getenv("AGATE_WORKER_RUN_MAIN") == "1" {
		main() // TestSignalStopsTheWorker runs this test binary as the worker command
		os.Exit(0)
	}
	testenv.Main(m)
}

// TestSignalStopsTheWorker runs the command as a process and stops it with SIGTERM.
func TestSignalStopsTheWorker(t *testing.T) {
	url, ns := testenv.NATS(t), testenv.Namespace(t)
	ensureStreams(t, url, ns)
	cmd := exec.Command(os.Args[0], "--instance-id", "signal-test", "--log-level", "debug")
	cmd.Env = append(os.Environ(), "AGATE_WORKER_RUN_MAIN=1", "NATS_URL="+url, "AGATE_NAMESPACE="+ns)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()

	lines := bufio.NewScanner(stderr)
	var log strings.Builder
	for lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), "worker started") {
			break
		}
	}
	if !strings.Contains(log.String(), "instance=signal-test") {
		t.Fatalf("the worker did not start:\n%s", log.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for lines.Scan() {
			log.WriteString(lines.Text() + "\n")
		}
		done <- cmd.Wait()
	}()
	var exitErr error
	select {
	case exitErr = <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("worker did not exit after SIGTERM; log:\n%s", log.String())
	}
	if exitErr != nil {
		t.Errorf("worker exited with %v after SIGTERM, want status 0; log:\n%s", exitErr, log.String())
	}
	if !strings.Contains(log.String(), "worker stopped") {
		t.Errorf("no \"worker stopped\" line in the log:\n%s", log.String())
	}
}

// ensureStreams creates the namespace's streams, as a scheduler node does at start: a worker
// only looks them up, and waits until they exist.
func ensureStreams(t *testing.T, url, ns string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
}

func TestFlagWinsOverEnv(t *testing.T) {
	t.Setenv("AGATE_NAMESPACE", "from-env")
	t.Setenv("AGATE_CONCURRENCY", "7")
	t.Setenv("NATS_URL", "nats://env:4222")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--namespace", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(cmd.Flags()); err != nil {
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
	if err := cli.ApplyEnv(newCommand().Flags()); err == nil {
		t.Error("AGATE_ACK_WAIT=soon was accepted")
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

func TestVersion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--version")
	cmd.Env = append(os.Environ(), "AGATE_WORKER_RUN_MAIN=1")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "worker ") {
		t.Errorf("--version: %v, output %q", err, out)
	}
}
