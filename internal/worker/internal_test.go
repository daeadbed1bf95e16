package worker

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

func TestBackoffDoublesAndCaps(t *testing.T) {
	w := &Worker{cfg: Config{RetryDelay: time.Second, MaxRetryDelay: 10 * time.Second}}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		got := w.backoff(attempt)
		if got < want*9/10 || got > want*11/10 {
			t.Errorf("backoff(%d) = %s, want %s ±10%%", attempt, got, want)
		}
	}
}

func TestTruncateKeepsUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := truncate(s, 5)
	if !utf8.ValidString(got) || got != "éé…" {
		t.Errorf("truncate = %q", got)
	}
	if truncate("short", 10) != "short" {
		t.Error("truncate changed a short string")
	}
	if q := quoteBody([]byte(strings.Repeat("\xff", 300))); !utf8.ValidString(q) || q == "" {
		t.Errorf("quoteBody of binary = %q", q)
	}
}

// The run counters are read when metrics are collected: a run in flight counts until it
// finishes, and a run counts under its outcome once it has; nothing is reported after the
// worker stops.
func TestRunCountersAreReadAtCollection(t *testing.T) {
	m := metrictest.New(t)
	ms := newMetrics(m.Provider, []string{"a", "b"})
	unregister, err := ms.register()
	if err != nil {
		t.Fatal(err)
	}
	ms.started(t.Context(), "a", 1, time.Second)
	ms.started(t.Context(), "a", 2, time.Second)
	ms.started(t.Context(), "b", 1, 0)
	if got := m.Sum(t, "agate.worker.jobs.in_flight", metrictest.Attrs{"job_type": "a"}); got != 2 {
		t.Errorf("a in flight = %d, want 2", got)
	}
	ms.finished(t.Context(), "a", outcomeFailed, time.Millisecond)
	ms.finished(t.Context(), "a", outcomeCompleted, time.Millisecond)
	for _, c := range []struct {
		name  string
		attrs metrictest.Attrs
		want  int64
	}{
		{"agate.worker.jobs.in_flight", metrictest.Attrs{"job_type": "a"}, 0},
		{"agate.worker.jobs.in_flight", metrictest.Attrs{"job_type": "b"}, 1},
		{"agate.worker.runs", metrictest.Attrs{"job_type": "a", "outcome": "completed"}, 1},
		{"agate.worker.runs", metrictest.Attrs{"job_type": "a", "outcome": "failed"}, 1},
		{"agate.worker.runs", metrictest.Attrs{"job_type": "b"}, 0},
	} {
		if got := m.Sum(t, c.name, c.attrs); got != c.want {
			t.Errorf("%s%v = %d, want %d", c.name, c.attrs, got, c.want)
		}
	}
	if count, _ := m.Histogram(t, "agate.worker.start.lateness", metrictest.Attrs{"job_type": "a"}); count != 1 {
		t.Errorf("start lateness of a: %d values, want 1 (retries are not counted)", count)
	}
	unregister()
	if got := m.Sum(t, "agate.worker.runs", nil); got != 0 {
		t.Errorf("runs after the worker stopped = %d, want none reported", got)
	}
}
