package main

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/worker"
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
	nc, js := testenv.JetStream(t, url)
	defer nc.Close()
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

// TestWorkerRunsAJob wires the worker as main does, runs a noop job and an http job (to a
// loopback server, which --http-allow must allow) through it and stops it.
func TestWorkerRunsAJob(t *testing.T) {
	url, ns := testenv.NATS(t), testenv.Namespace(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--http-allow", "127.0.0.1/32"}); err != nil {
		t.Fatal(err)
	}
	allow := *cmd.Flags().Lookup("http-allow").Value.(*worker.HTTPAllowList)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runWorker(ctx, options{
			natsURL: url, namespace: ns, instanceID: "cmd-test", concurrency: 2, maxDeliver: 2, outcomeBatch: worker.OutcomeBatchDefault,
			ackWait: 2 * time.Second, jobTimeout: time.Minute, drainTimeout: 5 * time.Second, httpAllow: allow,
		}, slog.New(slog.DiscardHandler))
	}()

	nc, js := testenv.JetStream(t, url)
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	for typ, data := range map[string]string{"noop": `{}`, "http": `{"url":"` + srv.URL + `/"}`} {
		sub, err := nc.SubscribeSync(events.Subjects(ns).Done(typ))
		if err != nil {
			t.Fatal(err)
		}
		f := events.JobFired{FireID: uuid.Must(uuid.NewV7()), Job: events.JobRef{Group: "g", Name: "n", Type: typ},
			Data: json.RawMessage(data), ScheduledTime: time.Now().UTC()}
		ev, err := events.New(events.TypeJobFired, events.Source(ns, "test"), events.AggregateJob, "g.n",
			events.Subjects(ns).Fired(typ), time.Now(), f)
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
			t.Fatalf("%s: no outcome: %v", typ, err)
		}
		var res events.JobResult
		envl, err := events.Decode(m.Data, &res)
		if err != nil || envl.Type != events.TypeJobCompleted || res.FireID != f.FireID || res.Worker != "cmd-test" {
			t.Fatalf("%s: outcome %s %+v (%v, error %+v); want JobCompleted of fire %s by cmd-test", typ, envl.Type, res, err, res.Error, f.FireID)
		}
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

// TestHTTPAllowFlag: --http-allow and AGATE_HTTP_ALLOW are read, and an invalid entry stops the
// command with an error naming the flag or the variable.
func TestHTTPAllowFlag(t *testing.T) {
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--http-allow", "127.0.0.1/32, localhost", "--http-allow", "::1"}); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flags().Lookup("http-allow").Value.String(); got != "127.0.0.1/32,::1/128,localhost" {
		t.Errorf("--http-allow = %q", got)
	}

	t.Setenv("AGATE_HTTP_ALLOW", "169.254.169.254/32,metadata.internal")
	cmd = newCommand()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if err := cli.ApplyEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flags().Lookup("http-allow").Value.String(); got != "169.254.169.254/32,metadata.internal" {
		t.Errorf("--http-allow from AGATE_HTTP_ALLOW = %q", got)
	}

	if err := newCommand().ParseFlags([]string{"--http-allow", "127.0.0.1:8080"}); err == nil ||
		!strings.Contains(err.Error(), "--http-allow") || !strings.Contains(err.Error(), "without scheme, port or path") {
		t.Errorf("--http-allow 127.0.0.1:8080: error %v, want one naming the flag and the problem", err)
	}
	t.Setenv("AGATE_HTTP_ALLOW", "10.0.0.0/33")
	if err := cli.ApplyEnv(newCommand().Flags()); err == nil || !strings.Contains(err.Error(), "AGATE_HTTP_ALLOW") ||
		!strings.Contains(err.Error(), "not a CIDR") {
		t.Errorf("AGATE_HTTP_ALLOW=10.0.0.0/33: error %v, want one naming the variable and the problem", err)
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
