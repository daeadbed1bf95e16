// Package recovery is step ⑦ of the lifecycle, beside the main path: it keeps the cluster whole.
//
//   - Check-in: each node writes its last check-in time with the database clock (now()), so a
//     node with a skewed clock can neither be declared dead nor declare others dead.
//   - Failed nodes: a node that has not checked in for 2 × its interval + a grace period is dead.
//     Its ACQUIRED claims go back to WAITING (another node fires them) and its row is removed.
//     Its EXECUTING fires need nothing: their JobFired events are in the log, the outbox sweep
//     publishes any the node did not, and workers, not schedulers, run jobs — so unlike Quartz no
//     execution dies with a scheduler node.
//   - Misfires: WAITING triggers later than the misfire threshold (acquire leaves them alone) get
//     their misfire instruction applied (trigger.UpdateAfterMisfire) and a TriggerMisfired event.
package recovery
