package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agatesched/agate/internal/devenv/testnode"
)

// agatectl is a built agatectl binary run as a subprocess against a running cluster.
type agatectl struct {
	t   *testing.T
	bin string
	env []string
}

func buildAgatectl(t *testing.T, natsURL, ns string) *agatectl {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agatectl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building agatectl: %v\n%s", err, out)
	}
	return &agatectl{t: t, bin: bin, env: append(os.Environ(), "NATS_URL="+natsURL, "AGATE_NAMESPACE="+ns)}
}

// run runs agatectl with args and returns its exit status and output.
func (a *agatectl) run(args ...string) (code int, stdout, stderr string) {
	a.t.Helper()
	cmd := exec.Command(a.bin, args...)
	cmd.Env = a.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		a.t.Fatalf("running agatectl %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}

// must runs agatectl and requires exit status want and stdout containing each of contains.
func (a *agatectl) must(want int, args []string, contains ...string) string {
	a.t.Helper()
	code, out, errs := a.run(args...)
	if code != want {
		a.t.Fatalf("agatectl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
	}
	for _, s := range contains {
		if !strings.Contains(out+errs, s) {
			a.t.Fatalf("agatectl %s: output lacks %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), s, out, errs)
		}
	}
	return out
}

const scheduleYAML = `jobs:
  - job: {group: reports, name: daily, type: noop, data: {url: "http://reports.internal/run"}}
    triggers:
      - {group: reports, name: nightly, cron: {expression: "0 0 2 * * ?", timeZone: Europe/Paris}}
  - job: {group: ops, name: vacuum, type: noop, durable: true}
`

// agatectl as an operator runs it: the built binary against a running cluster, through NATS
// only; output for people and for scripts, and the documented exit codes.
func TestAgatectlAgainstACluster(t *testing.T) {
	n := testnode.Start(t, "ctl", nil)
	a := buildAgatectl(t, n.NATSURL, n.Namespace)
	file := filepath.Join(t.TempDir(), "jobs.yaml")
	if err := os.WriteFile(file, []byte(scheduleYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	first := a.must(0, []string{"schedule", "-f", file}, "TRIGGER", "reports.nightly")
	// Applying the same file again is idempotent: the same answer, nothing changed.
	if again := a.must(0, []string{"schedule", "-f", file}); again != first {
		t.Fatalf("applying the file again printed\n%s\nthe first time\n%s", again, first)
	}
	a.must(0, []string{"pause", "trigger", "reports.nightly"}, "reports.nightly is PAUSED")
	a.must(0, []string{"resume", "trigger", "reports.nightly"}, "reports.nightly is WAITING")
	out := a.must(0, []string{"pause", "group", "reports", "-o", "json"})
	var paused map[string]int
	if err := json.Unmarshal([]byte(out), &paused); err != nil || paused["paused"] != 1 {
		t.Fatalf("pause group -o json printed %q; want {\"paused\": 1}", out)
	}
	a.must(0, []string{"explain", "reports.nightly"}, "Paused", "paused", "its group reports was paused")
	a.must(2, []string{"explain", "reports.nightly", "--at", "tomorrow"}, "--at", "RFC 3339")
	a.must(0, []string{"resume", "all"}, "resumed 1 trigger(s)")
	a.must(0, []string{"trigger", "ops.vacuum", "--data", `{"reason":"test"}`}, "ops.vacuum fires now")
	a.must(0, []string{"schedule", "--job", "ops.ping", "--type", "noop", "--every", "1h"}, "ops.ping")

	// Rejections exit 1 with the contract's code; bad input exits 2; an unreachable cluster 3.
	a.must(1, []string{"pause", "trigger", "reports.missing"}, "not_found")
	a.must(1, []string{"schedule", "--job", "ops.bad", "--type", "noop", "--cron", "0 0 25 * * ?"}, "invalid_argument", "triggers[0].cron.expression")
	a.must(2, []string{"schedule", "--job", "ops.x"}, "--type is required")
	a.must(2, []string{"pause", "trigger", "no-dot"}, "is not GROUP.NAME")
	a.must(3, []string{"pause", "all", "--nats-url", "nats://127.0.0.1:1"}, "cannot reach NATS")
	a.must(0, []string{"get", "job", "reports.daily"}, "job reports.daily (type noop, version 1)", "reports.nightly")
	a.must(0, []string{"list", "triggers", "--group", "reports"}, "reports.nightly", "cron 0 0 2 * * ? Europe/Paris")
	a.must(0, []string{"list", "jobs", "--limit", "1"}, "ops.ping", "more: --cursor ")
	out = a.must(0, []string{"next", "reports.nightly", "-n", "3"})
	if lines := strings.Fields(out); len(lines) != 3 {
		t.Fatalf("next -n 3 printed %q", out)
	}
	a.must(0, []string{"history", "trigger", "reports.nightly"}, "trigger.resumed", "trigger.paused", "trigger.scheduled")
	a.must(0, []string{"instances"}, "n1")
	a.must(0, []string{"workers"}, "WORKER", "SEEN AGO", "JOB TYPE", "LAST DELIVERED")
	a.must(1, []string{"get", "trigger", "reports.gone"}, "not_found")
	a.must(0, []string{"delete", "job", "ops.ping"}, "deleted job ops.ping")
}
