package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The settings under which a transaction reads tables in an index's order (the statement
// IndexOrder): sequential scans, bitmap scans and sorts off, and JIT compilation too, as the price
// those settings give a sort the plan cannot avoid puts it above jit_above_cost (3.3 s to compile
// a history that runs in 2 ms). They are for statements whose only good plan is an index scan
// that stops early, on statistics that tell the planner otherwise (docs/performance.md, "Plans",
// rules 5, 7 and 8). A transaction begins with them, sent with the BEGIN in one round trip (a
// statement without parameters goes by the simple protocol, which runs several).
var (
	// indexOrderBegin begins an InIndexOrder transaction.
	indexOrderBegin = "begin read only; " + queries.Get("IndexOrder")
	// hotBegin begins an InHotTx transaction: the same settings, and generic plans.
	hotBegin = "begin; " + queries.Get("IndexOrder") + "; set local plan_cache_mode = force_generic_plan"
)

// InHotTx is InTx for the fire path's transactions: an acquire pass, the fire queue's, a
// completion's. Open has every statement planned with its parameters at every execution
// (force_custom_plan), and these run many times a second: in a steady 5,000 fires a second,
// planning took 2.6 s of PostgreSQL's CPU in 20 s, 0.45–0.5 ms at every SelectDue and
// UpdateTriggers (docs/performance.md, "Plans", rule 8). In a hot transaction each statement
// keeps the plan it was given the first time on its connection (force_generic_plan), and runs
// in index order: so ordered, a fire path statement has one plan whatever its parameters and
// the tables' statistics, by key, by ctid or along an index, and a plan made on an empty table
// stays good as it grows (TestHotTransactionsNeverScanATable). Inserts from arrays
// (CollectGeneric) keep their generic plan here too.
func InHotTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{BeginQuery: hotBegin}, fn)
}

// InIndexOrder runs sql, a read, in a read-only transaction of its own in index order, and
// hands its rows to read. A history reads a job's events newest first by a backward scan of the
// log's aggregate index over every partition, which stops after the page; for a trigger's
// history, whose job comes from the trigger's TriggerScheduled, the planner cannot know how many
// events the job has, and on its estimates it read all of a busy job's events and sorted them.
func InIndexOrder(ctx context.Context, pool *pgxpool.Pool, sql string, args []any, read func(pgx.Rows) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{BeginQuery: indexOrderBegin}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		if err := read(rows); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
}
