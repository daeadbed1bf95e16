package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/natsperm"
)

func TestMain(m *testing.M) {
	if os.Getenv("AGATE_SCHEDULER_RUN_MAIN") == "1" {
		main() // the tests below run this test binary as the scheduler command
		os.Exit(0)
	}
	if os.Getenv("AGATE_TRACE_PRODUCER") == "1" {
		if err := runProducer(); err != nil { // TestTracesAcrossProcesses's producer
			fmt.Fprintln(os.Stderr, "producer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

var firedLine = regexp.MustCompile(`msg=fired .* fire_id=(\S+)`)

// runDevUntil runs `scheduler dev` on dataDir in a process group of its own, as a terminal runs
// a foreground job, until its log shows want fired lines; then it calls check, when not nil, with
// the address of its HTTP listener, sends SIGINT to the whole group, as Ctrl-C does, and returns
// the log and the exit error.
func runDevUntil(t *testing.T, dataDir string, want int, check func(addr string)) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "dev", "--data-dir", dataDir, "--nats-port", "0", "--instance-id", "dev-test",
		"--http", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1", "DATABASE_URL=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()

	var log bytes.Buffer
	lines := bufio.NewScanner(stderr)
	fired := 0
	deadline := time.AfterFunc(2*time.Minute, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	defer deadline.Stop()
	var addr string
	ran := check == nil // check reads the worker's metrics: a run must have been counted
	for (fired < want || !ran) && lines.Scan() {
		log.WriteString(lines.Text() + "\n")
		if firedLine.MatchString(lines.Text()) {
			fired++
		}
		if m := servingLine.FindStringSubmatch(lines.Text()); m != nil {
			addr = m[1]
		}
		// The worker logs a run after counting it.
		ran = ran || strings.Contains(lines.Text(), `msg="job completed"`)
	}
	if fired < want {
		t.Fatalf("dev cluster logged %d fires, want %d:\n%s", fired, want, log.String())
	}
	if check != nil {
		if addr == "" {
			t.Fatalf("dev cluster logged no HTTP listener:\n%s", log.String())
		}
		check(addr) // a few requests: the log the process writes meanwhile fits in the pipe

	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() {
		log.WriteString(lines.Text() + "\n")
	}
	return log.String(), cmd.Wait()
}

// TestDevStopsCleanlyOnCtrlC runs the dev cluster twice on one data directory. Each run must log
// every fire once, stop on Ctrl-C with status 0, and the second must not log the first's fires.
func TestDevStopsCleanlyOnCtrlC(t *testing.T) {
	// Not t.TempDir(): PostgreSQL runs as its own user, who must be able to enter the directory.
	dir, err := os.MkdirTemp("", "agate-dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	first, err := runDevUntil(t, dir, 3, func(addr string) {
		// One listener for the node and the worker: both's conditions, both's metrics.
		_, checks := readiness(t, addr)
		for _, probe := range []string{"database", "jetstream", "cluster", "loops", "nats", "consumers"} {
			if _, ok := checks[probe]; !ok {
				t.Errorf("dev /readyz has no %s check: %v", probe, checks)
			}
		}
		_, body := get(t, addr, "/metrics")
		for _, name := range []string{"agate_scheduler_fires_total", "agate_worker_runs_total"} {
			if !strings.Contains(body, name+"{") {
				t.Errorf("dev /metrics has no %s", name)
			}
		}
	})
	if err != nil {
		t.Fatalf("first run exited with %v after SIGINT, want status 0; log:\n%s", err, first)
	}
	second, err := runDevUntil(t, dir, 2, nil)
	if err != nil {
		t.Fatalf("second run exited with %v after SIGINT, want status 0; log:\n%s", err, second)
	}
	seen := map[string]bool{}
	for _, m := range firedLine.FindAllStringSubmatch(first, -1) {
		if seen[m[1]] {
			t.Errorf("fire %s logged twice in the first run:\n%s", m[1], first)
		}
		seen[m[1]] = true
	}
	for _, m := range firedLine.FindAllStringSubmatch(second, -1) {
		if seen[m[1]] {
			t.Errorf("fire %s of the first run logged again after the restart:\n%s", m[1], second)
		}
		seen[m[1]] = true
	}
	if !strings.Contains(first, "msg=scheduled trigger=examples.every-3s") {
		t.Errorf("the first run did not log the example triggers being scheduled:\n%s", first)
	}
	for _, log := range []string{first, second} {
		if !strings.Contains(log, "Agate dev cluster stopped") {
			t.Errorf("no clean stop in the log:\n%s", log)
		}
		if strings.Contains(log, "level=ERROR") || strings.Contains(log, "&{") {
			t.Errorf("an error, or a Go struct printed as a value, in the log:\n%s", log)
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, `msg=completed`) {
				t.Errorf("a completion is logged by the tail besides the worker: %s", line)
			}
		}
	}
}

func TestVersion(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--version")
	cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "scheduler ") {
		t.Errorf("--version: %v, output %q", err, out)
	}
}

func TestHelpShowsNoRandomDefault(t *testing.T) {
	t.Setenv("AGATE_INSTANCE_ID", "from-the-environment")
	var out bytes.Buffer
	root := rootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "--instance-id") && strings.Contains(line, "(default \"") {
			t.Errorf("--instance-id shows a default value: %s", line)
		}
	}
	if strings.Contains(out.String(), "from-the-environment") {
		t.Errorf("--help shows the environment's value:\n%s", out.String())
	}
}

// A setting out of range stops the node before it connects to anything, saying what is allowed.
func TestRunRejectsSettingsOutOfRange(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"--partitions-at-once", "-1", "partitions at once must be between 1 and 16"},
		{"--partitions-at-once", "17", "partitions at once must be between 1 and 16"},
		{"--fire-batch", "0", "--fire-batch 0: give 1 to 1000"},
		{"--fire-batch", "1001", "--fire-batch 1001: give 1 to 1000"},
	} {
		// A node that accepted the setting would wait for the database: the timeout ends it.
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "run", "--database-url", "postgres://nobody@127.0.0.1:1/none",
			tc.flag, tc.value)
		cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %s: %v, output %q; want %q", tc.flag, tc.value, err, out, tc.want)
		}
	}
}

// lineReader reads a process's log line by line, keeping all of it for failure messages.
type lineReader struct {
	t     *testing.T
	lines *bufio.Scanner
	log   strings.Builder
}

// until reads lines until one contains want, failing the test if the log ends first.
func (r *lineReader) until(want string) {
	r.t.Helper()
	for r.lines.Scan() {
		r.log.WriteString(r.lines.Text() + "\n")
		if strings.Contains(r.lines.Text(), want) {
			return
		}
	}
	r.t.Fatalf("the log ended without %q:\n%s", want, r.log.String())
}

// A scheduler started while PostgreSQL and NATS are down says so, once each, waits for them,
// and runs when they come.
func TestRunWaitsForPostgresAndNATS(t *testing.T) {
	pg := testenv.StartPostgres(t)
	nats := testenv.StartNATS(t)
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	nats.Shutdown()

	cmd := exec.Command(os.Args[0], "run", "--instance-id", "waiting", "--database-url", pg.URL("postgres"), "--nats-url", nats.URL())
	cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	deadline := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	r := &lineReader{t: t, lines: bufio.NewScanner(stderr)}

	r.until("PostgreSQL is not answering yet; waiting for it")
	if err := pg.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.until("NATS is not answering yet; waiting for it")
	if err := nats.Restart(); err != nil {
		t.Fatal(err)
	}
	r.until("scheduler node started")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for r.lines.Scan() {
		r.log.WriteString(r.lines.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("scheduler exited with %v after SIGTERM, want status 0:\n%s", err, r.log.String())
	}
	for _, once := range []string{"PostgreSQL is not answering yet", "NATS is not answering yet"} {
		if n := strings.Count(r.log.String(), once); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", once, n, r.log.String())
		}
	}
}

func TestNATSConfigPrintsTheGeneratedBlock(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []natsperm.Namespace
	}{
		{[]string{"nats-config"}, []natsperm.Namespace{{Name: "default"}}},
		{[]string{"nats-config", "--namespace", "default", "--namespace", "billing:billing-"},
			[]natsperm.Namespace{{Name: "default"}, {Name: "billing", UserPrefix: "billing-"}}},
	} {
		var out bytes.Buffer
		root := rootCommand()
		root.SetOut(&out)
		root.SetArgs(tc.args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		want, err := natsperm.Config(tc.want...)
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("%v printed:\n%s\nwant:\n%s", tc.args, out.String(), want)
		}
	}
	root := rootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"nats-config", "--namespace", "a.b"})
	if err := root.Execute(); err == nil {
		t.Error("nats-config accepted namespace a.b")
	}
}
