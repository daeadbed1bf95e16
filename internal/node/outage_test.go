package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
)

// migrated migrates the database at url and returns url.
func migrated(t *testing.T, url string) string {
	t.Helper()
	pool, err := store.Open(t.Context(), url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.Migrate(t.Context(), pool); err != nil {
		t.Fatal(err)
	}
	return url
}

// PostgreSQL killed (as a crash would) and back after an outage, while triggers fire: firing
// resumes by itself, and every due fire happens exactly once. A node that could not fire a claim
// while the database was down keeps it and fires it when the database returns; it never holds a
// claim it is not going to fire.
func TestPostgresOutageLosesNothing(t *testing.T) {
	pg := testenv.StartPostgres(t)
	e := newEnvOn(t, migrated(t, pg.URL("postgres")))
	e.startNode("n1", nil)
	e.startWorker("w1", nil, nil)

	// 20 triggers firing every 100 ms for 6 s, and 200 one-shots over the same 6 s.
	t0 := time.Now().Add(time.Second)
	e.scheduleRepeating(20, t0, 100*time.Millisecond, 59)
	for i := range 200 {
		name := fmt.Sprintf("o%03d", i)
		if out := e.request("schedule_job", map[string]any{"id": name, "job": job("g", name, "noop", nil, nil),
			"triggers": []any{oneShot("g", name, t0.Add(time.Duration(i)*30*time.Millisecond))}}); !out.OK {
			t.Fatalf("schedule_job: %+v", out.Error)
		}
	}
	const want = 20*60 + 200
	e.waitFor(20*time.Second, "the fires to be under way", func() bool {
		return e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted) >= 100
	})
	if err := pg.Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // how long the outage lasts, not a wait for something
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := pg.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCount(60*time.Second, "fires completed", want,
		`select count(distinct data->>'fireId') from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobCompleted)
	if n := e.count(`select count(*) from (select 1 from events where sched_name = $1 and type = $2
		group by data->'trigger'->>'name', data->>'scheduledTime' having count(*) > 1) d`, e.ns, events.TypeJobFired); n != 0 {
		t.Errorf("%d (trigger, time) pairs fired more than once", n)
	}
	if n := e.count(`select count(*) from events where sched_name = $1 and type = $2`, e.ns, events.TypeJobFired); n != want {
		t.Errorf("%d fires, want %d", n, want)
	}
}
