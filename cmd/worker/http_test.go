package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
)

// TestWorkerServesHealthAndMetrics runs `worker --http` as a process: /readyz turns 200 once it
// pulls, a job it ran shows in /metrics, `worker healthcheck` says so, and SIGTERM stops it with
// status 0.
func TestWorkerServesHealthAndMetrics(t *testing.T) {
	url, ns := testenv.NATS(t), testenv.Namespace(t)
	ensureStreams(t, url, ns)
	cmd := exec.Command(os.Args[0], "--instance-id", "http-test", "--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGATE_WORKER_RUN_MAIN=1", "NATS_URL="+url, "AGATE_NAMESPACE="+ns)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	logged := make(chan string, 100000)
	var log strings.Builder // read only once logged is closed
	go func() {
		defer close(logged)
		for s := bufio.NewScanner(stderr); s.Scan(); {
			logged <- s.Text()
		}
	}()
	serving := regexp.MustCompile(`msg="serving HTTP" addr=(\S+)`)
	var addr string
	for line := range logged {
		log.WriteString(line + "\n")
		if m := serving.FindStringSubmatch(line); m != nil {
			addr = m[1]
			break
		}
	}
	if addr == "" {
		t.Fatalf("the worker logged no HTTP listener:\n%s", log.String())
	}
	base := "http://" + addr

	// Ready once its pull loops run: asked until then, as an orchestrator would.
	if code, body := testenv.AwaitHTTP(t, base+"/readyz", 200, 30*time.Second); code != 200 {
		t.Fatalf("/readyz still %d %s after 30s", code, body)
	} else if !strings.Contains(body, `"nats":"ok"`) || !strings.Contains(body, `"consumers":"ok"`) {
		t.Errorf("/readyz 200: %s", body)
	}
	healthcheck := exec.Command(os.Args[0], "healthcheck")
	healthcheck.Env = append(os.Environ(), "AGATE_WORKER_RUN_MAIN=1", "AGATE_HTTP_ADDR="+addr)
	if out, err := healthcheck.CombinedOutput(); err != nil || !strings.Contains(string(out), `"ready":true`) {
		t.Errorf("worker healthcheck: %v %s", err, out)
	}

	// A noop job: its outcome on the bus means the run was counted.
	nc, js := testenv.JetStream(t, url)
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
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("no outcome: %v", err)
	}
	code, body := testenv.HTTPGet(t, base+"/metrics")
	for _, want := range []string{
		`agate_worker_runs_total{job_type="noop",outcome="completed"} 1`,
		`agate_worker_run_duration_seconds_count{job_type="noop",outcome="completed"} 1`,
		`agate_worker_jobs_in_flight{job_type="noop"} 0`,
		`agate_worker_start_lateness_seconds_count{job_type="noop"} 1`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for line := range logged {
		log.WriteString(line + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("worker exited with %v after SIGTERM, want status 0:\n%s", err, log.String())
	}
}
