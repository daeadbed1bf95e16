// Package retention keeps what the database remembers bounded. Its [Pruner] forgets the
// outcomes of commands (commands_seen) and the bodies of rejected ones (rejected_bodies) once
// they are older than the idempotency window: a command sent again within the window is
// answered with its remembered outcome, one sent again after it is handled as new.
//
// Every scheduler node runs a Pruner for its namespace. Passes delete a thousand rows per
// statement, each statement its own short transaction, so pruning never holds locks that
// firing or command intake would wait on for long; passes of several nodes at once delete each
// row once and are otherwise harmless.
//
// [Events] keeps the event log bounded: it makes the log's day partitions ahead, stores a
// snapshot of the log's projection every snapshot interval (internal/replay), and drops the
// days older than the event retention once the snapshots cover them and no execution in flight
// needs them. Nodes take turns under an advisory lock.
package retention
