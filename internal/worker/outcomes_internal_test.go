package worker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/events"
)

// Outcomes waiting together are split by subject, in order, and within the count and size a
// message may hold; one larger than a message goes alone.
func TestOutcomeBatchesKeepToSubjectCountAndSize(t *testing.T) {
	o := &outcomes{max: 3}
	subj := events.Subjects("ns")
	var qs []queued
	add := func(typ string, data int) {
		ev, err := events.New(events.TypeJobCompleted, "agate/ns/w", events.AggregateJob, "g.j", subj.Done(typ), time.Now(),
			events.JobResult{Data: []byte(`"` + strings.Repeat("x", data) + `"`)})
		if err != nil {
			t.Fatal(err)
		}
		ev.Subject = fmt.Sprint(len(qs)) // to name it below
		qs = append(qs, queued{ev: ev})
	}
	for range 4 {
		add("a", 10)
	}
	add("b", 10)
	add("a", 10)
	add("b", 5000) // larger than the limit below
	add("b", 10)
	var got []string
	for _, b := range o.batches(qs, 2000) {
		var names []string
		for _, q := range b {
			names = append(names, q.ev.Subject)
		}
		got = append(got, strings.Join(names, ","))
	}
	want := "0,1,2 3,5 4 6 7"
	if strings.Join(got, " ") != want {
		t.Errorf("batches %q, want %q", strings.Join(got, " "), want)
	}
}
