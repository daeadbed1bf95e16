package worker

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
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
