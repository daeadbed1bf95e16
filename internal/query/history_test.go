package query

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/store"
)

// A history reads a page of the log, newest first, whatever the statistics: a trigger's fires
// are logged under its job, and the planner, which cannot know how many events that job has,
// read all of a busy job's events and sorted them for every page.
func TestHistoryReadsAPageOfABusyJob(t *testing.T) {
	ctx := t.Context()
	pool, err := store.Open(ctx, testenv.MigratedDatabase(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	const busy = 40000
	for _, q := range []string{
		`do $$ declare p regclass; begin
		   for p in select inhrelid::regclass from pg_inherits where inhparent = 'events'::regclass loop
		     execute format('alter table %s set (autovacuum_enabled = false)', p);
		   end loop; end $$`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 values (gen_random_uuid(), 'h', 'agate.trigger.scheduled', 'agate/h/n1', 'trigger', 'g.t1', now(),
		         '{"trigger": {"group": "g", "name": "t1"}, "job": {"group": "g", "name": "busy"}}')`,
		// The busy job's fires, of three triggers in turn, among as many events of other jobs.
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 select gen_random_uuid(), 'h', 'agate.job.fired', 'agate/h/n1', 'job', 'g.busy', now(),
		        json_build_object('job', json_build_object('group', 'g', 'name', 'busy', 'type', 'noop'),
		                          'trigger', json_build_object('group', 'g', 'name', 't' || i % 3))
		 from generate_series(1, ` + strconv.Itoa(busy) + `) i`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 select gen_random_uuid(), 'h', 'agate.job.fired', 'agate/h/n1', 'job', 'g.j' || i, now(),
		        json_build_object('job', json_build_object('group', 'g', 'name', 'j' || i, 'type', 'noop'),
		                          'trigger', json_build_object('group', 'g', 'name', 'o' || i))
		 from generate_series(1, ` + strconv.Itoa(busy) + `) i`,
		`analyze events`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	const page = 51
	for _, c := range []struct {
		stmt string
		key  string
		want int // rows of the page: the trigger's are a third of its job's
	}{
		{"TriggerHistory", "t1", page},
		{"JobHistory", "busy", page},
	} {
		var plan []byte
		err := inIndexOrder(ctx, pool, "explain (analyze, format json) "+queries.Get(c.stmt),
			[]any{"h", "g." + c.key, "g", c.key, int64(1 << 62), page, true},
			func(rows pgx.Rows) error {
				defer rows.Close()
				for rows.Next() {
					if err := rows.Scan(&plan); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		if err != nil {
			t.Fatal(err)
		}
		returned, read := logRowsRead(t, plan)
		t.Logf("%s: %.0f rows returned, %.0f of the log's read", c.stmt, returned, read)
		if returned != float64(c.want) || read > 4*page {
			t.Errorf("a page of %d of %s's history returned %.0f rows and read %.0f of the log's, where its job has %d\n%s",
				page, c.key, returned, read, busy, plan)
		}
	}
}

// logRowsRead is what an EXPLAIN ANALYZE plan returned, and how many rows it read of the log's
// partitions, those it filtered out included.
func logRowsRead(t *testing.T, plan []byte) (returned, read float64) {
	t.Helper()
	type node struct {
		Relation string  `json:"Relation Name"`
		Rows     float64 `json:"Actual Rows"`
		Removed  float64 `json:"Rows Removed by Filter"`
		Loops    float64 `json:"Actual Loops"`
		Plans    []node  `json:"Plans"`
	}
	var top []struct {
		Plan node `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &top); err != nil || len(top) != 1 {
		t.Fatalf("reading plan: %v\n%s", err, plan)
	}
	var walk func(n node)
	walk = func(n node) {
		if strings.HasPrefix(n.Relation, "events") {
			read += (n.Rows + n.Removed) * n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	return top[0].Plan.Rows, read
}
