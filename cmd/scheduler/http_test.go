package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
)

// process is a binary run by a test, its log read line by line as it comes (so that the process
// never blocks on a full pipe) and kept whole for failure messages.
type process struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	log   strings.Builder
	done  chan struct{} // closed when the log ended
}

func startProcess(t *testing.T, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command(os.Args[0], args...), lines: make(chan string, 100000), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	go func() {
		defer close(p.done)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.mu.Lock()
			p.log.WriteString(s.Text() + "\n")
			p.mu.Unlock()
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	return p
}

func (p *process) logged() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// until returns the first line still unread that matches re, with its submatches.
func (p *process) until(re *regexp.Regexp) []string {
	p.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				p.t.Fatalf("the log ended without %s:\n%s", re, p.logged())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			p.t.Fatalf("no %s in the log within a minute:\n%s", re, p.logged())
		}
	}
}

// get requests a path of the listener at addr and returns the status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	return testenv.HTTPGet(t, "http://"+addr+path)
}

// readiness is a /readyz answer: its status and its checks.
func readiness(t *testing.T, addr string) (int, map[string]string) {
	t.Helper()
	code, body := get(t, addr, "/readyz")
	var rep struct{ Checks map[string]string }
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatalf("/readyz answered %d %q: %v", code, body, err)
	}
	return code, rep.Checks
}

// awaitReadiness asks /readyz until it answers code: the node's loops get there on their own,
// and /readyz is how anything outside the process learns it.
func awaitReadiness(t *testing.T, p *process, addr string, code int) map[string]string {
	t.Helper()
	if got, _ := testenv.AwaitHTTP(t, "http://"+addr+"/readyz", code, 30*time.Second); got != code {
		got, checks := readiness(t, addr)
		t.Fatalf("/readyz still %d %v after 30s, want %d:\n%s", got, checks, code, p.logged())
	}
	_, checks := readiness(t, addr)
	return checks
}

// metricValue is the value of the sample of metric name whose labels include labels, as /metrics
// shows it; "" when there is none.
func metricValue(body, name string, labels ...string) string {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok && len(labels) == 0 {
			return v
		}
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, _ := strings.Cut(rest, "} ")
		all := true
		for _, l := range labels {
			all = all && strings.Contains(","+set+",", ","+l+",")
		}
		if all {
			return value
		}
	}
	return ""
}

var servingLine = regexp.MustCompile(`msg="serving HTTP" addr=(\S+)`)

// TestRunServesHealthAndMetrics runs `scheduler run --http` as a process: /healthz answers while
// it waits for its database, /readyz says the database and the cluster are not ready until it
// has joined, then 200; a fire shows in /metrics; /readyz names the database when it goes away;
// and SIGTERM stops the process, listener included, with status 0.
func TestRunServesHealthAndMetrics(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ns := testenv.StartNATS(t)
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "run", "--instance-id", "http-test", "--database-url", pg.URL("postgres"), "--nats-url", ns.URL(),
		"--http", "127.0.0.1:0", "--checkin-interval", "1s")
	addr := p.until(servingLine)[1]

	p.until(regexp.MustCompile("PostgreSQL is not answering yet"))
	if code, body := get(t, addr, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz while waiting for the database: %d %q", code, body)
	}
	code, checks := readiness(t, addr)
	if code != 503 || checks["database"] == "ok" || checks["cluster"] == "ok" || checks["loops"] == "ok" {
		t.Errorf("/readyz before the node joined: %d %v; want 503 naming the database, the cluster and the loops", code, checks)
	}

	if err := pg.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	p.until(regexp.MustCompile("scheduler node started"))
	checks = awaitReadiness(t, p, addr, 200)
	for _, probe := range []string{"database", "jetstream", "cluster", "loops"} {
		if checks[probe] != "ok" {
			t.Errorf("/readyz 200 with %s = %q", probe, checks[probe])
		}
	}

	// A fire: JobFired on the bus means the fire's transaction committed and was counted.
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subjects := events.Subjects("default")
	sub, err := nc.SubscribeSync(subjects.Fired("noop"))
	if err != nil {
		t.Fatal(err)
	}
	// Ready means the api service answers: the first request is answered, with retries off.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := client.New(nc, client.Options{Namespace: "default", RetryFor: -1}).ScheduleJob(ctx, client.ScheduleJob{
		ID:       "http-test-1",
		Job:      client.Job{Group: "g", Name: "j", Type: "noop"},
		Triggers: []client.Trigger{client.OneShot("g", "t", time.Now())},
	}); err != nil {
		t.Fatalf("schedule_job: %v", err)
	}
	if _, err := sub.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("no JobFired: %v\n%s", err, p.logged())
	}
	code, body := get(t, addr, "/metrics")
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"agate_scheduler_fires_total", []string{`outcome="fired"`}},
		{"agate_scheduler_commands_total", []string{`command="schedule_job"`, `code="ok"`}},
		{"agate_scheduler_fire_lateness_seconds_count", nil},
	} {
		if v := metricValue(body, c.name, c.labels...); code != 200 || v != "1" {
			t.Errorf("/metrics: %s%v = %q, want 1", c.name, c.labels, v)
		}
	}
	// The gauges read at scrape time, under their Prometheus names (alerts and dashboards use
	// these; composecheck derives them from the instruments' definitions).
	if v := metricValue(body, "agate_consumer_pending_messages", `consumer="scheduler-done"`); v != "0" {
		t.Errorf("/metrics: agate_consumer_pending_messages{consumer=scheduler-done} = %q, want 0", v)
	}
	if v, err := strconv.ParseFloat(metricValue(body, "agate_scheduler_outbox_lag_seconds"), 64); err != nil || v < 0 || v > 60 {
		t.Errorf("/metrics: agate_scheduler_outbox_lag_seconds = %v (%v), want a few seconds at most", v, err)
	}
	// The command took its lock partition waiting; the acquire pass claimed the trigger.
	for _, name := range []string{"agate_scheduler_lock_wait_seconds_count", "agate_scheduler_acquire_batch_size_count"} {
		if v, err := strconv.Atoi(metricValue(body, name)); err != nil || v < 1 {
			t.Errorf("/metrics: %s = %v (%v), want at least 1", name, v, err)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
	if code, _ := get(t, addr, "/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without --pprof: %d", code)
	}

	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	if checks := awaitReadiness(t, p, addr, 503); checks["database"] == "ok" {
		t.Errorf("/readyz 503 with the database gone, but database = ok: %v", checks)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("scheduler exited with %v after SIGTERM, want status 0:\n%s", err, p.logged())
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the HTTP listener still answers after the process exited")
	}
}

// --help of run and dev says what --http and --pprof do, their variables and defaults: none for
// run, 127.0.0.1:8080 for dev; and the healthcheck command is listed.
func TestHelpExplainsHTTP(t *testing.T) {
	help := func(args ...string) string {
		var out strings.Builder
		root := rootCommand()
		root.SetOut(&out)
		root.SetArgs(append(args, "--help"))
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	flagLine := func(h, flag string) string {
		for _, line := range strings.Split(h, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), flag+" ") { // the flag's own line, not the description's
				return line
			}
		}
		return ""
	}
	for _, cmd := range []string{"run", "dev"} {
		h := help(cmd)
		line := flagLine(h, "--http")
		for _, want := range []string{"/healthz", "/readyz", "/metrics", "127.0.0.1", "AGATE_HTTP_ADDR"} {
			if !strings.Contains(line, want) {
				t.Errorf("%s --help: the --http line does not say %q: %s", cmd, want, line)
			}
		}
		if line := flagLine(h, "--pprof"); !strings.Contains(line, "/debug/pprof/") || !strings.Contains(line, "AGATE_PPROF") {
			t.Errorf("%s --help: --pprof line: %s", cmd, line)
		}
		hasDefault := strings.Contains(line, `(default "`+devHTTPAddr+`")`)
		if (cmd == "dev") != hasDefault {
			t.Errorf("%s --help: --http default shown: %v: %s", cmd, hasDefault, line)
		}
	}
	if h := help(); !strings.Contains(h, "healthcheck") {
		t.Errorf("scheduler --help does not list healthcheck:\n%s", h)
	}
	if h := help("healthcheck"); !strings.Contains(h, "/readyz") || !strings.Contains(h, "AGATE_HTTP_ADDR") {
		t.Errorf("healthcheck --help:\n%s", h)
	}
}
