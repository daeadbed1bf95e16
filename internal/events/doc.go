// Package events is the vocabulary every process shares: the event types of the wire contract
// (docs/contract.md), their CloudEvents envelope and NATS message form, the subjects and
// JetStream streams of a namespace, and the identity of a process. It is a pure leaf: it imports
// nothing of Agate, so any step, tool or test may import it.
//
// Writing events to the log and publishing them is the outbox's job (internal/outbox).
package events
