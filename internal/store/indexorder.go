package store

import "github.com/jackc/pgx/v5"

// QueueIndexOrder queues on b, before the statement that needs it, the settings under which the
// rest of the transaction reads tables in an index's order: sequential scans, bitmap scans and
// sorts off. It is for a statement whose only good plan is an index scan that stops early, on
// statistics that tell the planner otherwise (docs/performance.md, "Plans", rules 5 and 7): the
// acquire pass's SelectDue, and the history of a trigger or a job, which reads a page of the log
// newest first.
func QueueIndexOrder(b *pgx.Batch) { b.Queue(queries.Get("IndexOrder")) }
