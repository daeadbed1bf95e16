package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// QueueIndexOrder queues on b, before the statement that needs it, the settings under which the
// rest of the transaction reads tables in an index's order: sequential scans, bitmap scans and
// sorts off. JIT compilation goes off too: the price those settings give a sort the plan cannot
// avoid puts it above jit_above_cost (3.3 s to compile a history that runs in 2 ms). It is for
// a statement whose only good plan is an index scan that stops early, on statistics that tell
// the planner otherwise (docs/performance.md, "Plans", rules 5 and 7): the acquire pass's
// SelectDue, and the histories of jobs and triggers (InIndexOrder).
func QueueIndexOrder(b *pgx.Batch) { b.Queue(queries.Get("IndexOrder")) }

// InIndexOrder runs sql, a read, in a read-only transaction of its own under QueueIndexOrder's
// settings, and hands its rows to read. A history reads a job's events newest first by a
// backward scan of the log's aggregate index over every partition, which stops after the page;
// for a trigger's history, whose job comes from the trigger's TriggerScheduled, the planner
// cannot know how many events the job has, and on its estimates it read all of a busy job's
// events and sorted them.
func InIndexOrder(ctx context.Context, pool *pgxpool.Pool, sql string, args []any, read func(pgx.Rows) error) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		QueueIndexOrder(b)
		b.Queue(sql, args...)
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		if err := read(rows); err != nil {
			return err
		}
		return br.Close()
	})
}
