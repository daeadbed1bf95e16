// Package complete is step ⑥ of the lifecycle: the completion consumer.
//
// It reads JobCompleted and JobFailed messages that workers publish on agate.<ns>.done.>, and
// applies a batch of them in transactions under TRIGGER_ACCESS (the ends of executions of
// concurrent jobs whose trigger fires again, which change nothing but their fired row, in one
// without it):
//
//   - a completion, or a final failure, deletes the fire's fired_triggers row; where a row was
//     deleted the job's BLOCKED triggers return to WAITING and PAUSED_BLOCKED ones to PAUSED
//     (non-concurrent jobs), and a non-durable job left with no trigger and no execution in
//     flight is deleted, as Quartz's triggeredJobComplete does (a trigger's last fire deleted
//     the trigger already: internal/fire);
//   - every outcome is appended to the event log (not published again: it is on the bus already).
//
// While its node fires a heavy flow (Config.Heavy), the outcomes whose recording takes the
// partition locks are held back, up to Config.Yield, so that the acquire passes, which skip a
// held partition, are not made late by them; the ends of repeating triggers' executions are
// recorded at once.
//
// It is idempotent: a completion delivered twice finds no fired row the second time and changes
// nothing; the log's unique event id drops the repeated event.
package complete
