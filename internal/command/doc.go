// Package command is step ① of the lifecycle: it turns producers' commands into trigger rows.
//
// Commands arrive on agate.<ns>.cmd.<command> (captured by the COMMANDS stream; the outcome is
// an event on agate.<ns>.evt.command) or agate.<ns>.api.<command> (request-reply; the outcome
// is the reply). Both paths run Handle: size limit, JSON, JSON Schema (schemas/json/command),
// semantic checks (cron syntax, time zones, job types), then one transaction that applies the
// command, appends its events and remembers the outcome under the command id, so a command sent
// twice is applied once and answered the same way twice.
//
// A rejected command changes no row: the rejection is recorded as a CommandRejected event (with
// the reason and the original body) and the message is acked, never redelivered forever.
package command
