// Package worker runs jobs: step ⑤ of the lifecycle (docs/architecture.md).
//
//	agate.<ns>.fired.<jobType> ──pull (durable worker-<jobType>, shared by every worker)──▶ handler
//	  ──▶ publish JobCompleted | JobFailed to agate.<ns>.done.<jobType> (PubAck awaited) ──▶ ack JobFired
//
// A scheduler node publishes one JobFired per fire, or several in a batch (--fire-batch), whose
// fires run each on a share of the message (events.Share). Every worker process binds to the same durable
// pull consumer per job type, so adding processes scales the work out. A worker fetches only as
// many fires as it has room for, heartbeats each message it holds (InProgress every AckWait/3)
// so a long job is not redelivered, runs the registered HandlerFunc under a timeout, publishes the
// outcome and only then acks. A crash anywhere before the ack therefore means the fire is
// delivered again, never that its completion is lost; consumers of completions are idempotent by
// fire id. A retryable failure publishes JobFailed{final:false} and naks with an exponential
// delay; the last allowed delivery, or a Permanent error, publishes JobFailed{final:true}, which is
// what lets the scheduler release the trigger.
//
// If the last allowed delivery is lost (its worker died, or could not publish), JetStream's
// MAX_DELIVERIES advisory makes another worker publish that final JobFailed instead (deadletter.go).
//
// Job types are the names handlers are registered under (Registry). RegisterBuiltins adds noop,
// sleep, log and http; there is deliberately no shell job type.
package worker
