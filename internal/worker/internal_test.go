package worker

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agatesched/agate/internal/events"
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

// The interrupt subscription passes over bodies without interruptType: an interrupt request as
// the schedulers publish it has it, the other job events do not.
func TestInterruptTypeIsInTheMessage(t *testing.T) {
	for typ, want := range map[string]bool{events.TypeJobInterruptRequested: true, events.TypeJobAdded: false, events.TypeJobDeleted: false} {
		ev, err := events.New(typ, events.Source("ns", "n1"), events.AggregateJob, "g.j", events.Subjects("ns").Evt("job"), time.Now(),
			events.InterruptRequest{Job: events.Key{Group: "g", Name: "j"}})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := events.Message(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(msg.Data, interruptType); got != want {
			t.Errorf("%s: contains %s = %v", typ, interruptType, got)
		}
	}
}
