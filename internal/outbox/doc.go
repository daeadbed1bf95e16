// Package outbox is step ④ of the lifecycle: the transactional outbox.
//
// The events table is both the event log and the outbox. A step changes state only through
// Outbox.InTx: the events it appends go into the log in the same transaction as the change they
// describe, and after commit the outbox publishes them to JetStream from a background queue.
// The sweep republishes anything committed but not published, in (xid, seq) order behind a
// cursor fenced by pg_snapshot_xmin, so a row whose transaction commits late is never skipped.
// Every message carries Nats-Msg-Id = event id, so JetStream drops duplicates inside its
// de-duplication window, and consumers are idempotent by fire id beyond it.
package outbox
