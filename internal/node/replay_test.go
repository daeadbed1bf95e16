package node_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/replay"
)

// checkReplay rebuilds the test's tables from its log, from the latest snapshot (a node's start
// takes one) and from the start, and fails the test when they differ from the live ones: every
// write path must log what it changed, and a snapshot must be a prefix of the log. It runs
// after the test's nodes and workers stopped.
func (e *env) checkReplay() {
	t := e.t
	if t.Failed() || e.editedByHand {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, fromStart := range []bool{false, true} {
		if fromStart && e.daysDropped {
			continue
		}
		rep, err := replay.Run(ctx, e.pool, e.ns, replay.Options{FromStart: fromStart})
		if err != nil {
			t.Fatalf("replaying the log (from the start: %v): %v", fromStart, err)
		}
		for _, d := range rep.Differences {
			t.Errorf("replay (from the start: %v) differs: %s", fromStart, d)
		}
	}
}

// tablesEditedByHand says the test changed rows itself, as no write path would (to stage a
// failure): its tables are not a function of its log.
func (e *env) tablesEditedByHand() { e.editedByHand = true }

// logDaysDropped says retention dropped the first days of the test's log: replay from its start
// would miss them.
func (e *env) logDaysDropped() { e.daysDropped = true }

// TestReplayFindsAWriteThatWasNotLogged: a change made behind the log's back shows up as a
// difference, column by column, and so does a row the log never mentioned.
func TestReplayFindsAWriteThatWasNotLogged(t *testing.T) {
	e := newEnv(t)
	e.startNode("r1", nil)
	far := time.Now().Add(time.Hour).UTC()
	out := e.request("schedule_job", map[string]any{"id": "c1",
		"job":      map[string]any{"group": "g", "name": "j", "type": "noop"},
		"triggers": []map[string]any{{"group": "g", "name": "t", "simple": map[string]any{}, "startAt": far}}})
	if !out.OK {
		t.Fatalf("schedule_job: %+v", out)
	}
	rep, err := replay.Run(t.Context(), e.pool, e.ns, replay.Options{})
	if err != nil || !rep.Equal() || rep.Rows["triggers"] != 1 || rep.Rows["job_details"] != 1 {
		t.Fatalf("replay of an untouched log: %+v, %v", rep, err)
	}
	e.tablesEditedByHand()
	e.exec(`update triggers set priority = 9 where sched_name = $1`, e.ns)
	e.exec(`insert into paused_trigger_grps (sched_name, trigger_group) values ($1, 'nobody')`, e.ns)
	rep, err = replay.Run(t.Context(), e.pool, e.ns, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range rep.Differences {
		got = append(got, d.String())
	}
	want := []string{"triggers g.t: priority: live 9, replayed 5", "paused_trigger_grps nobody: only in the live table"}
	if !slices.Equal(got, want) && !slices.Equal(got, []string{want[1], want[0]}) {
		t.Errorf("differences %q; want %q", got, want)
	}
}

// eventCounts is how many events of each type the test logged, for its log.
func (e *env) eventCounts() string {
	rows, err := e.pool.Query(e.t.Context(), `select type, count(*) from events where sched_name = $1 group by type order by type`, e.ns)
	if err != nil {
		e.t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			e.t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%d ", strings.TrimPrefix(typ, "agate."), n)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return b.String()
}
