package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testnode"
)

// running is an agatectl started in the background, its output read line by line.
type running struct {
	cmd    *exec.Cmd
	lines  chan string
	seen   []string // every line waitLine read
	stderr bytes.Buffer
	args   []string
}

// start runs agatectl with args without waiting for it; it is killed if still running when the
// test ends.
func (a *agatectl) start(args ...string) *running {
	a.t.Helper()
	r := &running{cmd: exec.Command(a.bin, args...), lines: make(chan string, 1000), args: args}
	r.cmd.Env = a.env
	r.cmd.Stderr = &r.stderr
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		a.t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		a.t.Fatal(err)
	}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	a.t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	return r
}

// waitLine returns the next line of output holding every one of parts, failing the test if the
// output ends first or no such line comes within a minute (a follow prints as things happen).
func (r *running) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-r.lines:
			r.seen = append(r.seen, line)
			if !ok {
				t.Fatalf("agatectl %s ended without printing a line with %q; it printed:\n%s\nstderr: %s",
					strings.Join(r.args, " "), parts, strings.Join(r.seen, "\n"), r.stderr.String())
			}
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
				return line
			}
		case <-timeout:
			t.Fatalf("agatectl %s printed no line with %q within a minute; it printed:\n%s", strings.Join(r.args, " "), parts, strings.Join(r.seen, "\n"))
		}
	}
}

// interrupt sends Ctrl-C and returns the exit status and the lines printed after the last one
// read.
func (r *running) interrupt(t *testing.T) (int, []string) {
	t.Helper()
	if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for line := range r.lines { // read to the end before Wait, which closes the pipe
		rest = append(rest, line)
	}
	err := r.cmd.Wait()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), rest
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, rest
}

// agatectl events against a node and a worker: a follow prints a fire as it happens, only of
// its job, and ends with status 0 on Ctrl-C; then the stored events, in store order, for people
// and as CloudEvents JSON, filtered by job, trigger, type and time.
func TestAgatectlEvents(t *testing.T) {
	n := testnode.Start(t, "ctlevents", nil)
	n.StartWorker(t)
	a := buildAgatectl(t, n.NATSURL, n.Namespace)

	follow := a.start("events", "--follow", "--job", "ops.now")
	follow.waitLine(t, "TIME", "TYPE", "SUBJECT", "DETAIL") // printed once it reads: nothing later is missed
	now := time.Now().UTC().Format(time.RFC3339)
	a.must(0, []string{"schedule", "--job", "ops.other", "--type", "noop", "--at", now}, "ops.other")
	a.must(0, []string{"schedule", "--job", "ops.now", "--trigger", "ops.at", "--type", "noop", "--at", now}, "ops.at")
	follow.waitLine(t, "trigger.scheduled", "ops.at", "job=ops.now")
	follow.waitLine(t, "job.fired", "ops.now", "trigger=ops.at", "fireId=")
	follow.waitLine(t, "job.completed", "ops.now", "worker=w1", "attempt=1")
	code, rest := follow.interrupt(t)
	if code != 0 {
		t.Errorf("events --follow interrupted: exit %d; want 0 (stderr: %s)", code, follow.stderr.String())
	}
	for _, l := range append(follow.seen, rest...) {
		if strings.Contains(l, "ops.other") {
			t.Errorf("events --follow --job ops.now printed %q", l)
		}
	}
	// The follow read them from the streams, so they are stored: a read of what is stored finds them.

	out := a.must(0, []string{"events"}, "command.accepted", "command=schedule_job")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	at := func(parts ...string) int {
		return slices.IndexFunc(lines, func(l string) bool {
			return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) })
		})
	}
	order := [][]string{{"trigger.scheduled", "ops.at"}, {"job.fired", "ops.now"}, {"job.completed", "ops.now"}}
	for i, parts := range order {
		if at(parts...) < 0 || i > 0 && at(parts...) < at(order[i-1]...) {
			t.Errorf("events: %q missing or out of order:\n%s", parts, out)
		}
	}
	if at("job.completed", "ops.other") < 0 {
		t.Errorf("events lacks the other job's completion:\n%s", out)
	}

	out = a.must(0, []string{"events", "--job", "ops.now", "--type", "job.fired"})
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "job.fired") {
		t.Errorf("events --job ops.now --type job.fired printed\n%s\nwant the header and one fire", out)
	}
	out = a.must(0, []string{"events", "--trigger", "ops.at", "--since", "all"})
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || strings.Contains(out, "ops.other") {
		t.Errorf("events --trigger ops.at printed\n%s\nwant the header, its scheduling, its fire (its last) and its completion", out)
	}
	out = a.must(0, []string{"events", "--since", "2099-01-01T00:00:00Z"})
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "TIME") {
		t.Errorf("events --since 2099 printed\n%s\nwant the header alone", out)
	}

	out = a.must(0, []string{"events", "--type", "JobCompleted,job.fired", "--job", "ops.now", "-o", "json"})
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev struct {
			SpecVersion, ID, Type, Source, Subject, DataContentType string
			Time                                                    time.Time
			Data                                                    struct{ FireID, Worker string }
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events -o json: line %q is not JSON: %v", line, err)
		}
		if ev.SpecVersion != "1.0" || ev.ID == "" || ev.Subject != "ops.now" || ev.DataContentType != "application/json" ||
			!strings.HasPrefix(ev.Source, "agate/ctlevents/") || ev.Time.IsZero() || ev.Data.FireID == "" {
			t.Errorf("events -o json: %s is not the CloudEvents form of a fire or an outcome of ops.now", line)
		}
		types = append(types, ev.Type)
	}
	if !slices.Equal(types, []string{"agate.job.fired", "agate.job.completed"}) {
		t.Errorf("events -o json printed types %q; want the fire, then the completion", types)
	}

	// A follow from a time in the past prints the stored events first.
	follow = a.start("events", "-f", "--since", "1h", "--type", "job.completed")
	follow.waitLine(t, "job.completed", "ops.now")
	if code, _ := follow.interrupt(t); code != 0 {
		t.Errorf("events -f --since 1h interrupted: exit %d; want 0", code)
	}

	a.must(2, []string{"events", "--type", "job.exploded"}, "unknown event type", "job.completed")
	a.must(2, []string{"events", "--since", "yesterday"}, "--since")
	a.must(2, []string{"events", "--job", "nodot"}, "is not GROUP.NAME")
	a.must(2, []string{"events", "-o", "yaml"}, "--output")
	a.must(3, []string{"events", "--namespace", "ctleventsnone"}, "AGATE_ctleventsnone_EVENTS does not exist")
}

// --since and the defaults: the last hour without --follow, from now with it.
func TestEventsOptions(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		follow  bool
		since   string
		want    time.Time
		newOnly bool
	}{
		{false, "", now.Add(-time.Hour), false},
		{true, "", time.Time{}, true},
		{true, "10m", now.Add(-10 * time.Minute), false},
		{false, "P1D", now.Add(-24 * time.Hour), false},
		{false, "2026-11-30T08:00:00+01:00", time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), false},
		{false, "all", time.Time{}, false},
	} {
		opts, err := eventsOptions(tc.follow, tc.since, "", "", nil, now)
		if err != nil || !opts.Since.Equal(tc.want) || opts.NewOnly != tc.newOnly || opts.Follow != tc.follow {
			t.Errorf("follow %v, --since %q: %+v, %v; want since %s, new only %v", tc.follow, tc.since, opts, err, tc.want, tc.newOnly)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "0s"} {
		if _, err := eventsOptions(false, bad, "", "", nil, now); exitCode(err) != 2 {
			t.Errorf("--since %q: %v; want a usage error", bad, err)
		}
	}
	opts, err := eventsOptions(false, "", "ops.a", "ops.t", []string{"job.fired", " JobCompleted"}, now)
	if err != nil || opts.Job.String() != "ops.a" || opts.Trigger.String() != "ops.t" ||
		!slices.Equal(opts.Types, []string{"agate.job.fired", "agate.job.completed"}) {
		t.Errorf("filters: %+v, %v", opts, err)
	}
}
