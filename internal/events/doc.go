// Package events is the leaf every lifecycle step imports: the event types of CONTRACT.md, their
// CloudEvents envelope, the NATS subjects and JetStream streams, Append (write events to the log in
// the caller's transaction) and the outbox Relay that publishes them.
//
// The events table is both the event log and the transactional outbox. A step appends its events
// in the same transaction as the state change they describe; after commit the node publishes them
// at once (Relay.Publish), and the Relay's sweep republishes anything a crashed node left behind.
// Every message carries Nats-Msg-Id = event id, so JetStream drops the sweep's duplicates inside
// its de-duplication window, and consumers are idempotent by fire id beyond it.
package events
