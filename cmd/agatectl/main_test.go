package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func runTest(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	fixed := func() time.Time { return time.Date(2026, 6, 15, 10, 17, 23, 456e6, time.UTC) }
	code = runAt(args, &out, &errb, fixed)
	return code, out.String(), errb.String()
}

func TestCronExplainText(t *testing.T) {
	code, out, errs := runTest(t, "cron", "explain", "0 30 2 * * ?", "--tz", "America/New_York", "--from", "2026-03-07T00:00:00-05:00", "-n", "3")
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	want := "2026-03-07T02:30:00-05:00\n2026-03-09T02:30:00-04:00\n2026-03-10T02:30:00-04:00\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

func TestCronExplainJSON(t *testing.T) {
	code, out, _ := runTest(t, "cron", "explain", "0 0 12 ? * MON-FRI", "--from", "2026-11-20T12:00:00.250Z", "-n", "2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	want := map[string]any{"expression": "0 0 12 ? * MON-FRI", "timeZone": "UTC", "next": []any{"2026-11-23T12:00:00Z", "2026-11-24T12:00:00Z"}}
	if !jsonEqual(got, want) {
		t.Errorf("got %v want %v", got, want)
	}

	// A schedule that has ended prints an empty list, not null.
	_, out, _ = runTest(t, "cron", "explain", "0 0 0 1 1 ? 2020", "-o", "json")
	if !strings.Contains(out, `"next":[]`) {
		t.Errorf("ended schedule: %s", out)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestCronExplainDefaults(t *testing.T) {
	// Default --from is now (fixed in the test), --tz UTC, -n 10.
	code, out, _ := runTest(t, "cron", "explain", "*/20 * * * * ?")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 || lines[0] != "2026-06-15T10:17:40Z" {
		t.Errorf("got %d lines, first %q", len(lines), lines[0])
	}
}

func TestCronExplainInvalidExitsTwo(t *testing.T) {
	for _, args := range [][]string{
		{"cron", "explain", "0 0 12 1 * MON"},
		{"cron", "explain", "L * * * * ?"},
		{"cron", "explain", "0 0 12 * * ?", "--tz", "Mars/Olympus"},
		{"cron", "explain", "0 0 12 * * ?", "--from", "yesterday"},
		{"cron", "explain", "0 0 12 * * ?", "-n", "-1"},
		{"cron", "explain", "0 0 12 * * ?", "-o", "yaml"},
		{"cron", "explain"},
		{"cron", "explain", "0 0 12 * * ?", "--bogus"},
		{"bogus"},
		{"cron", "bogus"},
	} {
		code, out, errs := runTest(t, args...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if out != "" || errs == "" {
			t.Errorf("%q: stdout %q, stderr %q", args, out, errs)
		}
	}
	_, _, errs := runTest(t, "cron", "explain", "0 0 12 1 * MON")
	if !strings.Contains(errs, "day-of-week and day-of-month cannot both be specified") || !strings.Contains(errs, "position 11") {
		t.Errorf("message does not say what and where: %q", errs)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runTest(t, "cron", "explain", "--help")
	if code != 0 || !strings.Contains(out, "--tz") || !strings.Contains(out, "RFC 3339") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	code, out, errs := runTest(t, "--version")
	if code != 0 || errs != "" || !strings.HasPrefix(out, "agatectl ") {
		t.Errorf("--version: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
