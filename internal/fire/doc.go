// Package fire is step ③ of the lifecycle: the fire transaction and the wait for fire time.
//
// FireInTx runs under the TRIGGER_ACCESS lock the caller holds. For each claim it re-reads the
// trigger, checks it is still in the state the claim expects at the claimed next fire time,
// advances it with the trigger package (Quartz's triggered()), and writes, per batch, one UPDATE
// of triggers (guarded by state and next_fire_time), one write of fired rows (now EXECUTING) and
// one multi-row insert of JobFired events into the log, which is also the outbox. The new trigger
// state follows Quartz: COMPLETE when it will not fire again, else BLOCKED for a non-concurrent
// job (whose other triggers become BLOCKED or PAUSED_BLOCKED too), else WAITING.
//
// Claims acquired ahead of their time wait in the Firer's queue; Run fires them when due. Claims
// still queued at shutdown are released (ACQUIRED → WAITING) so another node fires them.
package fire
