// Package fire is step ③ of the lifecycle: the fire transaction, and the wait for fire time.
//
// Firer.Fire runs inside a transaction that holds the claims' lock partition (acquire's, for
// claims already due; the Queue's own, for claims made ahead). For each claim it re-reads the
// trigger, checks it is still in the state the claim expects at the claimed next fire time,
// advances it with the trigger package (Quartz's triggered()), and writes, per batch, one UPDATE
// of triggers (guarded by state and next_fire_time), one write of fired rows (now EXECUTING) and
// JobFired events into the outbox. The new trigger state follows Quartz: COMPLETE when it will
// not fire again, else BLOCKED for a non-concurrent job (whose other triggers become BLOCKED or
// PAUSED_BLOCKED too), else WAITING. Unlike Quartz, which keeps a COMPLETE trigger until its
// last execution ends, the fire deletes it at once: the execution lives on in its fired row, and
// one delete costs far less than an update and a later delete. Its JobFired, which states every
// fired trigger's new state, says COMPLETE; no second event repeats it (docs/contract.md, "A
// trigger's last fire").
//
// Queue holds the claims acquired ahead of their time and fires them when due. Claims whose fire
// transaction fails, and claims still queued when the node stops, are given back
// (ACQUIRED → WAITING) so that another pass or node fires them.
package fire
