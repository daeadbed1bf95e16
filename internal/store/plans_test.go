package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The statements of the fire and completion paths look their key lists up key by key, through
// primary keys or the hash of a job, even on tables that have grown since their last ANALYZE. A
// burst is scheduled seconds before it fires, before autovacuum analyzes anything: with plain
// joins the planner believed a namespace of 20,000 triggers held 33 and hashed all of them for
// every batch of 500 keys (docs/performance.md, "Plans").
func TestHotStatementsProbeKeysOnTablesNeverAnalyzed(t *testing.T) {
	ctx := t.Context()
	pool := openPool(t, 2)
	const ns = "plans"
	fillNeverAnalyzed(t, pool)
	var analyzed bool
	if err := pool.QueryRow(ctx, `select last_analyze is not null or last_autoanalyze is not null
		from pg_stat_user_tables where relname = 'triggers'`).Scan(&analyzed); err != nil || analyzed {
		t.Fatalf("triggers analyzed %v (err %v): the test needs a table without statistics", analyzed, err)
	}

	const k = 500
	kl := newKeyLists(k)
	groups, names, jobs, texts, times, ints, tids := kl.groups, kl.names, kl.jobs, kl.texts, kl.times, kl.ints, kl.tids
	ids, jsons, probes := kl.ids, kl.jsons, kl.probes
	read := func(path string) store.Queries { return readQueries(t, path) }
	fire, acquire, outbox, own := read("../fire/queries.sql"), read("../acquire/queries.sql"), read("../outbox/queries.sql"), read("queries.sql")
	query, recovery, command := read("../query/queries.sql"), read("../recovery/queries.sql"), read("../command/queries.sql")
	for _, c := range []struct {
		name string
		sql  string
		args []any
		// history: the statement reads the log only through its aggregate index, by the hash of
		// the aggregate (migration 017), whatever it reads of the other tables.
		history bool
	}{
		{"fire LoadForFire", fire.Get("LoadForFire"), []any{ns, groups, names}, false},
		{"fire UpdateTriggers", fire.Get("UpdateTriggers"), []any{tids, groups, names, texts, times, times, ints, times, texts}, false},
		{"fire BlockOthers", fire.Get("BlockOthers"), []any{ns, groups, jobs}, false},
		{"acquire NextWaiting", acquire.Get("NextWaiting"), []any{ns}, false},
		{"acquire MarkAcquired", acquire.Get("MarkAcquired"), []any{tids, groups, names, times, texts}, false},
		{"store EndRepeatingFired", own.Get("EndRepeatingFired"), []any{ids}, false},
		{"store ReleaseBlocked", own.Get("ReleaseBlocked"), []any{ns, groups, jobs}, false},
		{"store DeleteFinishedJobs", own.Get("DeleteFinishedJobs"), []any{ns, groups, jobs}, false},
		{"store SetTriggerError", own.Get("SetTriggerError"), []any{ns, groups, names}, false},
		{"command JobExecutions", command.Get("JobExecutions"), []any{ns, "g", "j7"}, false},
		{"command DeleteJobTriggers", command.Get("DeleteJobTriggers"), []any{ns, "g", "j7"}, false},
		{"command DeleteOrphanJob", command.Get("DeleteOrphanJob"), []any{ns, "g", "j7"}, false},
		{"query JobTriggers", query.Get("JobTriggers"), []any{ns, "g", "j7"}, false},
		{"query ExplainFiredRows", query.Get("ExplainFiredRows"), []any{ns, "g", "j7"}, false},
		{"outbox AppendFromBus", outbox.Get("AppendFromBus"), []any{ns, ids, texts, texts, texts, texts, texts, times, jsons, texts,
			probes, "agate/plans/n1"}, false},
		{"outbox SweepTxs", outbox.Get("SweepTxs"), []any{ns, "0", 0, 1000}, false},
		{"outbox SweepEvents", outbox.Get("SweepEvents"), []any{[]string{"1000", "1001"}, []int64{1, 4097}, []int64{500, 4596}, "0", 0}, false},
		{"query JobHistory", query.Get("JobHistory"), []any{ns, "g.j7", "g", "j7", int64(1 << 62), 50, true}, true},
		{"query TriggerHistory", query.Get("TriggerHistory"), []any{ns, "g.t7", "g", "t7", int64(1 << 62), 50, true}, true},
		{"query ExplainTriggerEvents", query.Get("ExplainTriggerEvents"), []any{ns, "g.t7", "g", "t7", 20}, true},
		{"query ExplainGroupEvents", query.Get("ExplainGroupEvents"), []any{ns, "g"}, true},
		{"query ExplainJobFires", query.Get("ExplainJobFires"), []any{ns, "g.j7", "2026-01-01T00:00:00Z", "2100-01-01T00:00:00Z", 20}, true},
		{"query ExplainTriggerEnd", query.Get("ExplainTriggerEnd"), []any{ns, "g.j7", "g.t7", "g", "t7"}, true},
		{"recovery Overdue", recovery.Get("Overdue"), []any{ns, 3, 60000, 5000, 100}, true},
	} {
		var plan []byte
		if err := pool.QueryRow(ctx, "explain (format json) "+c.sql, c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// Joins of any kind are fine between key lists and the rows found for them; what must not
		// happen is reading a table other than by TID or by a whole key.
		t.Logf("%s: %s", c.name, planTypes(t, plan))
		for _, node := range planNodes(t, plan) {
			if c.history {
				byHash := strings.HasPrefix(node.Type, "Index") && strings.Contains(node.IndexCond, "hashtextextended") ||
					node.Type == "Bitmap Heap Scan" && len(node.Plans) == 1 && strings.Contains(node.Plans[0].IndexCond, "hashtextextended")
				if strings.HasPrefix(node.Relation, "events") && !byHash {
					t.Errorf("%s reads %s other than by the aggregate's hash: %s %s\n%s", c.name, node.Relation, node.Type, node.IndexCond, plan)
				}
				continue
			}
			switch {
			case !slices.Contains([]string{"triggers", "job_details", "fired_triggers"}, node.Relation) &&
				!strings.HasPrefix(node.Relation, "events"): // the log's partitions too
			case node.Type == "Seq Scan", node.Type == "Bitmap Heap Scan" && !primaryKeyBitmap(node),
				strings.HasPrefix(node.Type, "Index") && !wholeKey(node):
				t.Errorf("%s scans %s rather than probing keys: %s %s\n%s", c.name, node.Relation, node.Type, node.IndexCond, plan)
			}
		}
	}
}

// A hot transaction (store.InHotTx, the fire path's) plans each statement once per connection
// and never reads a table by a sequential scan, although that plan was made while the statistics
// said the tables were empty and they have grown since without an ANALYZE: in index order, each
// statement has one plan whatever its parameters and the tables' statistics.
func TestHotTransactionsNeverScanATable(t *testing.T) {
	ctx := t.Context()
	// One connection: the plans made on the empty tables are the ones used. Their statistics say
	// they are empty, which prices a sequential scan below any other.
	pool := openPool(t, 1)
	if _, err := pool.Exec(ctx, "analyze"); err != nil {
		t.Fatal(err)
	}
	const ns, k = "plans", 500
	kl := newKeyLists(k)
	fire, acquire := readQueries(t, "../fire/queries.sql"), readQueries(t, "../acquire/queries.sql")
	outbox, own, complete := readQueries(t, "../outbox/queries.sql"), readQueries(t, "queries.sql"), readQueries(t, "../complete/queries.sql")
	now := time.Now()
	bools, epochs := make([]bool, k), make([]int64, k)
	hot := []struct {
		name, sql string
		args      []any
	}{
		{"store Lock", own.Get("Lock"), []any{ns, "TRIGGER_ACCESS/0"}},
		{"store TryLocks", own.Get("TryLocks"), []any{ns, []string{"TRIGGER_ACCESS/1"}}},
		{"store MemberEpoch", own.Get("MemberEpoch"), []any{ns, "n1"}},
		{"acquire SelectDue", acquire.Get("SelectDue"), []any{ns, now, now.Add(-time.Hour), k, 8, []int32{0}}},
		{"acquire MarkAcquired", acquire.Get("MarkAcquired"), []any{kl.tids, kl.groups, kl.names, kl.times, kl.texts}},
		{"store InsertFired", own.Get("InsertFired"), []any{ns, "n1", now, "EXECUTING", kl.ids, kl.groups, kl.names, kl.groups,
			kl.jobs, kl.times, bools, bools, kl.ints, epochs}},
		{"fire MarkExecuting", fire.Get("MarkExecuting"), []any{kl.ids, now}},
		{"fire AlreadyFired", fire.Get("AlreadyFired"), []any{kl.ids}},
		{"fire LoadForFire", fire.Get("LoadForFire"), []any{ns, kl.groups, kl.names}},
		{"store LoadCalendars", own.Get("LoadCalendars"), []any{ns, kl.names}},
		{"fire UpdateTriggers", fire.Get("UpdateTriggers"), []any{kl.tids, kl.groups, kl.names, kl.texts, kl.times, kl.times,
			kl.ints, kl.times, kl.texts}},
		{"fire BlockOthers", fire.Get("BlockOthers"), []any{ns, kl.groups, kl.jobs}},
		{"store SetTriggerError", own.Get("SetTriggerError"), []any{ns, kl.groups, kl.names}},
		{"store EndRepeatingFired", own.Get("EndRepeatingFired"), []any{kl.ids}},
		{"store EndFired", own.Get("EndFired"), []any{kl.ids}},
		{"store DeleteFired", own.Get("DeleteFired"), []any{kl.ids}},
		{"store ReleaseBlocked", own.Get("ReleaseBlocked"), []any{ns, kl.groups, kl.jobs}},
		{"store DeleteFinishedJobs", own.Get("DeleteFinishedJobs"), []any{ns, kl.groups, kl.jobs}},
		{"complete StoreJobData", complete.Get("StoreJobData"), []any{ns, kl.groups, kl.jobs, kl.jsons}},
		{"outbox AppendFromBus", outbox.Get("AppendFromBus"), []any{ns, kl.ids, kl.texts, kl.texts, kl.texts, kl.texts, kl.texts,
			kl.times, kl.jsons, kl.texts, kl.probes, "agate/plans/n1"}},
	}
	errRollback := errors.New("rolled back")
	type scan struct {
		Table string
		Scans int64
	}
	run := func() []scan {
		var scans []scan
		err := store.InHotTx(ctx, pool, func(tx pgx.Tx) error {
			for _, c := range hot {
				if _, err := tx.Exec(ctx, c.sql, c.args...); err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
			}
			rows, _ := tx.Query(ctx, `select relname::text, seq_scan from pg_stat_xact_user_tables where seq_scan > 0`)
			var err error
			scans, err = pgx.CollectRows(rows, pgx.RowToStructByPos[scan])
			if err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		return scans
	}
	if scans := run(); len(scans) > 0 { // the plans are made here, on empty tables
		t.Errorf("sequential scans on empty tables: %+v", scans)
	}
	fillNeverAnalyzed(t, pool)
	if scans := run(); len(scans) > 0 {
		t.Errorf("sequential scans with the plans made on empty tables, the tables grown to 20,000 rows: %+v", scans)
	}
	for _, c := range hot {
		var generic, custom int64
		if err := pool.QueryRow(ctx, `select generic_plans, custom_plans from pg_prepared_statements where statement = $1`,
			c.sql).Scan(&generic, &custom); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if generic != 2 || custom != 0 {
			t.Errorf("%s: ran with a generic plan %d times and a custom one %d times, want a generic one both times", c.name, generic, custom)
		}
	}
}

// fillNeverAnalyzed gives namespace "plans" 20,000 jobs, triggers, fired rows and events, with
// autovacuum off on their tables so that no ANALYZE follows.
func fillNeverAnalyzed(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{
		`alter table triggers set (autovacuum_enabled = false)`,
		`do $$ declare p regclass; begin
		   for p in select inhrelid::regclass from pg_inherits where inhparent = 'events'::regclass loop
		     execute format('alter table %s set (autovacuum_enabled = false)', p); -- the log's partitions
		   end loop; end $$`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, nats_subject, time, data)
		 select gen_random_uuid(), 'plans', 'JobFired', 'agate/plans/n1', 'job', 'g.j' || i, 'agate.plans.fired.noop', now(), '{}'
		 from generate_series(1, 20000) i`,
		`alter table job_details set (autovacuum_enabled = false)`,
		`insert into job_details (sched_name, job_group, job_name, job_type) select 'plans', 'g', 'j' || i, 'noop' from generate_series(1, 20000) i`,
		`insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule, start_time, next_fire_time, state)
		 select 'plans', 'g', 't' || i, 'g', 'j' || i, 'simple', '{}', now(), now(), 'WAITING' from generate_series(1, 20000) i`,
		`alter table fired_triggers set (autovacuum_enabled = false)`,
		`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
		   fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
		 select 'plans', gen_random_uuid(), 'g', 't' || i, 'g', 'j' || i, 'n' || i % 2, now(), now(), 'EXECUTING', false, false, 5
		 from generate_series(1, 20000) i`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
}

// keyLists are the array parameters of the hot statements: k keys g.t1…, g.j1…, states, times
// and the places a fire transaction read its triggers at, ids and events' data.
type keyLists struct {
	groups, names, jobs, texts, times, jsons []string
	ints                                     []int32
	tids                                     []pgtype.TID
	ids                                      []uuid.UUID
	probes                                   []bool
}

func newKeyLists(k int) keyLists {
	kl := keyLists{groups: make([]string, k), names: make([]string, k), jobs: make([]string, k), texts: make([]string, k),
		times: make([]string, k), jsons: make([]string, k), ints: make([]int32, k), tids: make([]pgtype.TID, k),
		ids: make([]uuid.UUID, k), probes: make([]bool, k)}
	for i := range k {
		kl.groups[i], kl.names[i], kl.jobs[i], kl.texts[i], kl.times[i] = "g", "t"+strconv.Itoa(i+1), "j"+strconv.Itoa(i+1), "WAITING", "2026-01-01T00:00:00Z"
		kl.tids[i] = pgtype.TID{BlockNumber: uint32(i / 100), OffsetNumber: uint16(i%100 + 1), Valid: true}
		kl.ids[i], kl.jsons[i], kl.probes[i] = uuid.New(), "{}", true // events appended, each probed for in the log
	}
	return kl
}

// readQueries reads a package's named statements from its queries.sql at path.
func readQueries(t *testing.T, path string) store.Queries {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return store.ParseQueries(string(b))
}

type planNode struct {
	Type      string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
	// With EXPLAIN ANALYZE: the rows returned and filtered out, each a mean over the loops.
	Rows    float64 `json:"Actual Rows"`
	Removed float64 `json:"Rows Removed by Filter"`
	Loops   float64 `json:"Actual Loops"`
}

// primaryKeyBitmap says whether a Bitmap Heap Scan reads the rows of a range of its table's
// primary key (the outbox sweep's seqs of a transaction) rather than of a secondary index.
// Its other children are subplans of its filter (an EXISTS probe).
func primaryKeyBitmap(n planNode) bool {
	var bitmaps []planNode
	for _, c := range n.Plans {
		if strings.HasPrefix(c.Type, "Bitmap") {
			bitmaps = append(bitmaps, c)
		}
	}
	return len(bitmaps) == 1 && bitmaps[0].Type == "Bitmap Index Scan" && strings.HasSuffix(bitmaps[0].Index, "_pkey") &&
		wholeKey(bitmaps[0])
}

// wholeKey says whether an index scan's condition names whole keys (several columns, an id, the
// hash of a job: migration 018) rather than reading a namespace: not an index's leading
// sched_name alone, nor no condition at all.
func wholeKey(n planNode) bool {
	return strings.Contains(n.IndexCond, " AND ") || n.IndexCond != "" && !strings.HasPrefix(n.IndexCond, "(sched_name =")
}

// planNodes flattens an EXPLAIN (FORMAT JSON) plan.
func planNodes(t *testing.T, plan []byte) []planNode {
	t.Helper()
	var top []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &top); err != nil || len(top) != 1 {
		t.Fatalf("reading plan: %v\n%s", err, plan)
	}
	var out []planNode
	var walk func(n planNode)
	walk = func(n planNode) {
		out = append(out, n)
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(top[0].Plan)
	return out
}

// The acquire pass's SelectDue reads the due triggers in triggers_acquire's order and each one's
// job by its primary key, also once autovacuum has analyzed the tables: fire times only move
// forward, so the histogram of next_fire_time soon ends before now and the planner takes every
// trigger for due. A steady 5,000/s then read all triggers, sorted them and hashed all jobs at
// every pass.
func TestSelectDueReadsTheAcquireIndexOnStaleStatistics(t *testing.T) {
	ctx := t.Context()
	pool := openPool(t, 2)
	for _, q := range []string{
		`alter table triggers set (autovacuum_enabled = false)`,
		`alter table job_details set (autovacuum_enabled = false)`,
		`insert into job_details (sched_name, job_group, job_name, job_type) select 'plans', 'g', 'j' || i, 'noop' from generate_series(1, 5000) i`,
		`insert into triggers (sched_name, trigger_group, trigger_name, job_group, job_name, kind, schedule, start_time, next_fire_time, state, partition)
		 select 'plans', 'g', 't' || i, 'g', 'j' || i, 'simple', '{}', '2026-01-01', '2026-01-01'::timestamptz + i * interval '200 us', 'WAITING', i % 1024
		 from generate_series(1, 5000) i`,
		`analyze triggers`,
		`analyze job_details`,
		// A minute later every trigger fired 60 times; the statistics still say the first second.
		`update triggers set next_fire_time = next_fire_time + interval '60 s'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	acquire := readQueries(t, "../acquire/queries.sql")
	// 70 ms of the flow is due: 350 triggers, where the statistics say all 5,000.
	args := []any{"plans", "2026-01-01T00:01:00.07Z", "2026-01-01T00:00:00.07Z", 500, 8, []int32{0, 1, 2, 3, 4, 5, 6, 7}}
	var plan []byte
	if err := pool.QueryRow(ctx, "explain (format json) "+acquire.Get("SelectDue"), args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	t.Logf("outside a hot transaction: %s", planTypes(t, plan))
	err := store.InHotTx(ctx, pool, func(tx pgx.Tx) error { // as the acquire pass runs it
		return tx.QueryRow(ctx, "explain (format json) "+acquire.Get("SelectDue"), args...).Scan(&plan)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range planNodes(t, plan) {
		switch {
		case node.Relation == "job_details" && (node.Type != "Index Scan" || node.Index != "job_details_pkey"):
			t.Errorf("SelectDue reads job_details by %s %s, not by its primary key\n%s", node.Type, node.Index, plan)
		case node.Relation == "triggers" && (node.Type != "Index Scan" || node.Index != "triggers_acquire"),
			node.Type == "Sort":
			t.Errorf("SelectDue reads triggers by %s %s, not in triggers_acquire's order\n%s", node.Type, node.Index, plan)
		}
	}
}

// A job's newest events are read by a backward scan of the log's aggregate index, over every
// partition, that stops once it has what it needs: a page of a job's or a trigger's history,
// the JobFired of an overdue execution. Where the job comes from another row (the trigger's
// TriggerScheduled, the fired row), the planner cannot know how many events it has, and on its
// estimates it read all of a busy job's events to sort them for a trigger's history;
// store.InIndexOrder runs the histories with scans and sorts that read everything off
// ("Plans", rule 7).
func TestJobEventLookupsReadAPageOfABusyJob(t *testing.T) {
	ctx := t.Context()
	pool := openPool(t, 2)
	const busy, page = 40000, 51
	fireID := uuid.New()
	for _, q := range []string{
		`do $$ declare p regclass; begin
		   for p in select inhrelid::regclass from pg_inherits where inhparent = 'events'::regclass loop
		     execute format('alter table %s set (autovacuum_enabled = false)', p);
		   end loop; end $$`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 values (gen_random_uuid(), 'plans', 'agate.trigger.scheduled', 'agate/plans/n1', 'trigger', 'g.t1', now(),
		         '{"trigger": {"group": "g", "name": "t1"}, "job": {"group": "g", "name": "busy"}}')`,
		// The busy job's fires, of three triggers in turn, among as many events of other jobs.
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 select gen_random_uuid(), 'plans', 'agate.job.fired', 'agate/plans/n1', 'job', 'g.busy', now(),
		        json_build_object('fireId', gen_random_uuid(), 'job', json_build_object('group', 'g', 'name', 'busy', 'type', 'noop'),
		                          'trigger', json_build_object('group', 'g', 'name', 't' || i % 3))
		 from generate_series(1, ` + strconv.Itoa(busy) + `) i`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 select gen_random_uuid(), 'plans', 'agate.job.fired', 'agate/plans/n1', 'job', 'g.j' || i, now(),
		        json_build_object('fireId', gen_random_uuid(), 'job', json_build_object('group', 'g', 'name', 'j' || i, 'type', 'noop'),
		                          'trigger', json_build_object('group', 'g', 'name', 'o' || i))
		 from generate_series(1, ` + strconv.Itoa(busy) + `) i`,
		// A trigger of the busy job scheduled after its fires, and its one fire, its last.
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 values (gen_random_uuid(), 'plans', 'agate.trigger.scheduled', 'agate/plans/n1', 'trigger', 'g.t9', now(),
		         '{"trigger": {"group": "g", "name": "t9"}, "job": {"group": "g", "name": "busy"}}')`,
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 values (gen_random_uuid(), 'plans', 'agate.job.fired', 'agate/plans/n1', 'job', 'g.busy', now(),
		         json_build_object('fireId', gen_random_uuid(), 'trigger', json_build_object('group', 'g', 'name', 't9'),
		                           'triggerState', 'COMPLETE'))`,
		// The busy job's latest fire, an hour ago, has no outcome.
		`insert into events (id, sched_name, type, source, aggregate, aggregate_id, time, data)
		 values (gen_random_uuid(), 'plans', 'agate.job.fired', 'agate/plans/n1', 'job', 'g.busy', now(),
		         json_build_object('fireId', '` + fireID.String() + `'::text, 'trigger', json_build_object('group', 'g', 'name', 't1')))`,
		`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
		   fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
		 values ('plans', '` + fireID.String() + `', 'g', 't1', 'g', 'busy', 'n1', now() - interval '1 hour', now() - interval '1 hour',
		         'EXECUTING', false, false, 5)`,
		// A burst's executions in flight, none overdue.
		`insert into fired_triggers (sched_name, entry_id, trigger_group, trigger_name, job_group, job_name, instance_id,
		   fired_time, sched_time, state, nonconcurrent, requests_recovery, priority)
		 select 'plans', gen_random_uuid(), 'g', 'o' || i, 'g', 'j' || i, 'n1', now(), now(), 'EXECUTING', false, false, 5
		 from generate_series(1, 20000) i`,
		`insert into outbox_cursor (sched_name) values ('plans')`,
		`analyze events`,
		`analyze fired_triggers`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	query, recovery := readQueries(t, "../query/queries.sql"), readQueries(t, "../recovery/queries.sql")
	for _, c := range []struct {
		name     string
		sql      string
		args     []any
		ordered  bool    // run as its package runs it: in index order (store.InIndexOrder), or not
		returned float64 // rows of the result
		most     float64 // of the log's rows read, at most
	}{
		// The trigger's fires are a third of its job's events.
		{"query TriggerHistory", query.Get("TriggerHistory"), []any{"plans", "g.t1", "g", "t1", int64(1 << 62), page, true}, true, page, 4 * page},
		{"query JobHistory", query.Get("JobHistory"), []any{"plans", "g.busy", "g", "busy", int64(1 << 62), page, true}, true, page, page},
		// The last fire of a trigger scheduled after the job's other fires: the job's two newest
		// events, and the trigger's scheduling.
		{"query ExplainTriggerEnd", query.Get("ExplainTriggerEnd"), []any{"plans", "g.busy", "g.t9", "g", "t9"}, true, 1, 3},
		// Its LIMIT 1 has the planner scan backward without the settings, which would have it
		// read the fired rows through an index: it runs without them.
		{"recovery Overdue", recovery.Get("Overdue"), []any{"plans", 3, 60000, 5000, 100}, false, 1, 1},
	} {
		var plan []byte
		explain := "explain (analyze, format json) " + c.sql
		var err error
		if c.ordered {
			err = store.InIndexOrder(ctx, pool, explain, c.args, func(rows pgx.Rows) error {
				defer rows.Close()
				for rows.Next() {
					if err := rows.Scan(&plan); err != nil {
						return err
					}
				}
				return rows.Err()
			})
		} else {
			err = pool.QueryRow(ctx, explain, c.args...).Scan(&plan)
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		nodes := planNodes(t, plan)
		var logRows float64
		for _, n := range nodes {
			if strings.HasPrefix(n.Relation, "events") {
				logRows += (n.Rows + n.Removed) * n.Loops
			}
		}
		var top []struct {
			Ms  float64         `json:"Execution Time"`
			JIT json.RawMessage `json:"JIT"`
		}
		if err := json.Unmarshal(plan, &top); err != nil || len(top) != 1 {
			t.Fatalf("reading plan: %v\n%s", err, plan)
		}
		t.Logf("%s: %.0f rows in %.1f ms, %.0f of the log's read: %s", c.name, nodes[0].Rows, top[0].Ms, logRows, planTypes(t, plan))
		// The settings price a sort of the page above jit_above_cost: compiling it took 3.3 s.
		if top[0].JIT != nil {
			t.Errorf("%s was JIT-compiled: %s", c.name, top[0].JIT)
		}
		if nodes[0].Rows != c.returned || logRows > c.most {
			t.Errorf("%s returned %.0f rows (want %.0f) and read %.0f of the log's (at most %.0f), where the busy job has %d\n%s",
				c.name, nodes[0].Rows, c.returned, logRows, c.most, busy, plan)
		}
	}
}

// planTypes lists a plan's nodes as type(relation), for a log line.
func planTypes(t *testing.T, plan []byte) string {
	t.Helper()
	var out []string
	for _, n := range planNodes(t, plan) {
		out = append(out, n.Type+"("+n.Relation+n.Index+")")
	}
	return strings.Join(out, " ")
}

// openPool opens a pool of conns connections on a freshly migrated database, closed when the
// test ends.
func openPool(t *testing.T, conns int32) *pgxpool.Pool {
	t.Helper()
	return openOn(t, testenv.MigratedDatabase(t), conns)
}

// openOn opens a pool of conns connections on the database at url, closed when the test ends.
func openOn(t *testing.T, url string, conns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := store.Open(t.Context(), url, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
