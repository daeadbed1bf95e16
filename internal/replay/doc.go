// Package replay rebuilds a namespace's tables from its event log, which makes the log the
// source of truth: State.Apply applies one event to in-memory rows (one function per event
// type, docs/contract.md "The log and the tables" says what each does), Run applies the log
// from the latest snapshot into a scratch schema and diffs it against the live tables, column
// by column, and TakeSnapshot stores the projection so that old days of the log can go.
//
// Claims made ahead of time are not logged (they cost a row per fire and last seconds): the
// projection shows their triggers WAITING, and the diff reads the live tables the same way.
package replay
