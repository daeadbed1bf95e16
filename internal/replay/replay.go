package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/store"
)

// Options tune a replay.
type Options struct {
	// Schema is the scratch schema the projections are written to; it is dropped and created
	// again. Default: agate_replay_<namespace>.
	Schema string
	// MaxDifferences caps the differing rows reported per table (default 100).
	MaxDifferences int
	// FromStart replays the whole log, ignoring the snapshots: it tells a snapshot that lacks an
	// event from a write path that logged wrong. The log must still hold its first day (the
	// upkeep drops a day only once a snapshot covers it).
	FromStart bool
}

// Difference is one row that differs between the live tables and the replayed ones: a column
// whose values differ, or a row only one side has (Column "", Live or Replayed nil).
type Difference struct {
	Table    string
	Key      string
	Column   string
	Live     any
	Replayed any
}

func (d Difference) String() string {
	switch {
	case d.Column != "":
		return fmt.Sprintf("%s %s: %s: live %s, replayed %s", d.Table, d.Key, d.Column, show(d.Live), show(d.Replayed))
	case d.Replayed == nil:
		return fmt.Sprintf("%s %s: only in the live table", d.Table, d.Key)
	default:
		return fmt.Sprintf("%s %s: only in the replay", d.Table, d.Key)
	}
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Report is what a replay found.
type Report struct {
	Namespace   string
	Schema      string
	Snapshot    Snapshot       // the snapshot replay started from (zero: none, the whole log)
	Events      int            // events applied after it
	Rows        map[string]int // rows replayed, by table
	Read        time.Duration  // reading and applying the log
	Write       time.Duration  // writing the scratch schema
	Compare     time.Duration  // diffing it against the live tables
	Differences []Difference
}

// Equal says the live tables are what the log says.
func (r Report) Equal() bool { return len(r.Differences) == 0 }

// Run rebuilds the projections of namespace ns from its log into a scratch schema and diffs
// them against the live tables. It reads without locks: run it on a quiet namespace (or accept
// that fires committed while it reads show up as differences).
func Run(ctx context.Context, pool *pgxpool.Pool, ns string, opts Options) (Report, error) {
	if opts.Schema == "" {
		opts.Schema = "agate_replay_" + ns
	}
	if opts.MaxDifferences <= 0 {
		opts.MaxDifferences = 100
	}
	rep := Report{Namespace: ns, Schema: opts.Schema, Rows: map[string]int{}}
	// One repeatable-read transaction sees the log and the live tables at one instant.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return rep, fmt.Errorf("replay: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := store.AllowIdle(ctx, tx); err != nil {
		return rep, fmt.Errorf("replay: %w", err)
	}

	start := time.Now()
	st, snap, n, err := Project(ctx, tx, ns, opts.FromStart)
	if err != nil {
		return rep, err
	}
	rep.Snapshot, rep.Events, rep.Read = snap, n, time.Since(start)

	start = time.Now()
	if err := write(ctx, tx, ns, opts.Schema, st, rep.Rows); err != nil {
		return rep, err
	}
	rep.Write = time.Since(start)

	start = time.Now()
	for _, t := range tables {
		diffs, err := diff(ctx, tx, ns, opts.Schema, t, opts.MaxDifferences)
		if err != nil {
			return rep, err
		}
		rep.Differences = append(rep.Differences, diffs...)
	}
	rep.Compare = time.Since(start)
	if err := tx.Commit(ctx); err != nil {
		return rep, fmt.Errorf("replay: keeping the scratch schema %s: %w", opts.Schema, err)
	}
	return rep, nil
}

// Project rebuilds the state of namespace ns: its latest snapshot, then the events after it in
// log order; with fromStart, the whole log. It returns the state, the snapshot it started from
// (zero: none) and the number of events applied after it.
func Project(ctx context.Context, tx pgx.Tx, ns string, fromStart bool) (*State, Snapshot, int, error) {
	st, snap := NewState(), Snapshot{}
	if !fromStart {
		var err error
		if st, snap, err = latest(ctx, tx, ns); err != nil {
			return nil, snap, 0, fmt.Errorf("replay: %w", err)
		}
	}
	n, err := apply(ctx, tx, st, ns, snap, 0)
	if err != nil {
		return nil, snap, n, fmt.Errorf("replay: %w", err)
	}
	return st, snap, n, nil
}

// table is a projected table: its key and the columns compared. live replaces a column's
// expression on the live side, where lives filters the live rows: what the log does not hold
// (claims made ahead, the fencing epoch) is left out.
type table struct {
	name  string
	key   []string
	cols  []string
	live  map[string]string
	where string
}

var tables = []table{
	{name: "job_details", key: []string{"job_group", "job_name"},
		cols: []string{"job_group", "job_name", "job_type", "description", "durable", "nonconcurrent",
			"requests_recovery", "timeout_ms", "data", "version", "persist_data"}},
	{name: "triggers", key: []string{"trigger_group", "trigger_name"},
		cols: []string{"trigger_group", "trigger_name", "job_group", "job_name", "kind", "schedule", "start_time",
			"end_time", "calendar_name", "priority", "misfire_instr", "next_fire_time", "prev_fire_time",
			"times_triggered", "state", "partition", "trace_context", "data", "version"},
		live: map[string]string{"state": "case state when 'ACQUIRED' then 'WAITING' else state end"}},
	{name: "fired_triggers", key: []string{"entry_id"},
		cols: []string{"entry_id", "trigger_group", "trigger_name", "job_group", "job_name", "instance_id",
			"fired_time", "sched_time", "state", "nonconcurrent", "requests_recovery", "priority", "recovering"},
		where: "state = 'EXECUTING'"},
	{name: "calendars", key: []string{"calendar_name"}, cols: []string{"calendar_name", "calendar", "version"}},
	{name: "paused_trigger_grps", key: []string{"trigger_group"}, cols: []string{"trigger_group"}},
}

func (t table) rows(st *State) [][]any {
	var out [][]any
	switch t.name {
	case "job_details":
		for _, j := range st.Jobs {
			out = append(out, []any{j.Key.Group, j.Key.Name, j.Type, j.Description, j.Durable, j.Nonconcurrent,
				j.RequestsRecovery, j.TimeoutMs, string(j.Data), j.Version, j.PersistData})
		}
	case "triggers":
		for _, x := range st.Triggers {
			out = append(out, []any{x.Key.Group, x.Key.Name, x.Job.Group, x.Job.Name, x.Kind, string(x.Schedule), x.Start,
				x.End, x.Calendar, x.Priority, x.Misfire, x.Next, x.Prev, x.Times, x.State, x.Partition, x.TraceContext,
				string(x.Data), x.Version})
		}
	case "fired_triggers":
		for _, f := range st.Fired {
			out = append(out, []any{f.ID, f.Trigger.Group, f.Trigger.Name, f.Job.Group, f.Job.Name, f.Instance,
				f.FiredTime, f.SchedTime, "EXECUTING", f.Nonconcurrent, f.RequestsRecovery, f.Priority, f.Recovering})
		}
	case "calendars":
		for _, c := range st.Calendars {
			out = append(out, []any{c.Name, string(c.Calendar), c.Version})
		}
	case "paused_trigger_grps":
		for g := range st.PausedGroups {
			out = append(out, []any{g})
		}
	}
	return out
}

// write creates the scratch schema with empty copies of the projected tables and copies the
// state into them.
func write(ctx context.Context, tx pgx.Tx, ns, schema string, st *State, counts map[string]int) error {
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, "drop schema if exists "+s+" cascade; create schema "+s); err != nil {
		return fmt.Errorf("replay: creating the scratch schema %s: %w", schema, err)
	}
	for _, t := range tables {
		if _, err := tx.Exec(ctx, fmt.Sprintf("create table %s.%s (like %s including defaults)", s, t.name, t.name)); err != nil {
			return fmt.Errorf("replay: creating %s.%s: %w", schema, t.name, err)
		}
		rows := t.rows(st)
		for i := range rows {
			rows[i] = append([]any{ns}, rows[i]...)
		}
		n, err := tx.CopyFrom(ctx, pgx.Identifier{schema, t.name}, append([]string{"sched_name"}, t.cols...), pgx.CopyFromRows(rows))
		if err != nil {
			return fmt.Errorf("replay: writing %s.%s: %w", schema, t.name, err)
		}
		counts[t.name] = int(n)
	}
	return nil
}

// diff compares a live table with its replayed copy, row by row on the key, column by column.
func diff(ctx context.Context, tx pgx.Tx, ns, schema string, t table, limit int) ([]Difference, error) {
	live := make([]string, len(t.cols))
	for i, c := range t.cols {
		live[i] = c
		if e, ok := t.live[c]; ok {
			live[i] = e + " as " + c
		}
	}
	where := ""
	if t.where != "" {
		where = " and " + t.where
	}
	on := make([]string, len(t.key))
	order := make([]string, len(t.key))
	for i, k := range t.key {
		on[i] = fmt.Sprintf("l.%s = r.%s", k, k)
		order[i] = fmt.Sprintf("coalesce(l.%s, r.%s)", k, k)
	}
	q := fmt.Sprintf(`with l as (select %s from %s where sched_name = $1%s),
		r as (select %s from %s.%s where sched_name = $1)
		select to_jsonb(l), to_jsonb(r) from l full join r on %s
		where l.%s is null or r.%s is null or to_jsonb(l) <> to_jsonb(r)
		order by %s limit $2`,
		strings.Join(live, ", "), t.name, where, strings.Join(t.cols, ", "), pgx.Identifier{schema}.Sanitize(), t.name,
		strings.Join(on, " and "), t.key[0], t.key[0], strings.Join(order, ", "))
	rows, err := tx.Query(ctx, q, ns, limit)
	if err != nil {
		return nil, fmt.Errorf("replay: comparing %s: %w", t.name, err)
	}
	defer rows.Close()
	var out []Difference
	for rows.Next() {
		var l, r map[string]any
		if err := rows.Scan(&l, &r); err != nil {
			return nil, fmt.Errorf("replay: comparing %s: %w", t.name, err)
		}
		side := l
		if side == nil {
			side = r
		}
		keys := make([]string, len(t.key))
		for i, k := range t.key {
			keys[i] = fmt.Sprint(side[k])
		}
		key := strings.Join(keys, ".")
		switch {
		case l == nil:
			out = append(out, Difference{Table: t.name, Key: key, Replayed: r})
		case r == nil:
			out = append(out, Difference{Table: t.name, Key: key, Live: l})
		default:
			cols := make([]string, 0, len(l))
			for c := range l {
				cols = append(cols, c)
			}
			sort.Strings(cols)
			for _, c := range cols {
				if !reflect.DeepEqual(l[c], r[c]) {
					out = append(out, Difference{Table: t.name, Key: key, Column: c, Live: l[c], Replayed: r[c]})
				}
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("replay: comparing %s: %w", t.name, err)
	}
	return out, nil
}
