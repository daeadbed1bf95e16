// Package command is step ① of the lifecycle: it turns producers' commands into trigger rows.
//
// Commands arrive on agate.<ns>.cmd.<command> (captured by the COMMANDS stream; the outcome is
// an event on agate.<ns>.evt.command) or agate.<ns>.api.<command> (request-reply; the outcome
// is the reply). Both paths check the size limit, JSON, JSON Schema (schemas/json/command) and
// decode the command on the caller's goroutine, then gather commands into batches by lock
// partition (gatherer): one transaction per batch (HandleBatch) takes the batch's partitions,
// applies each command in its own savepoint, appends its events and remembers each outcome under
// its command id, so a command sent twice is applied once and answered the same way twice.
//
// A new command plugs in with an entry in validate.go's decoders (decodeAs of its apply
// function). It locks every partition unless its struct implements jobScoped (scope.go), naming
// the jobs whose rows it writes; an apply function that schedules or moves a trigger calls
// applyCtx.dueAt, so that the acquire loop is woken when the trigger is due before its next pass.
//
// A rejected command changes no row: the rejection is recorded as a CommandRejected event (with
// the reason and the original body) and the message is acked, never redelivered forever.
package command
