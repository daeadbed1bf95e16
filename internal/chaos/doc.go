// Package chaos is Agate's chaos suite: it proves that Agate never fires twice and never loses a
// fire whatever fails.
//
// [Run] builds the binaries, starts a real PostgreSQL (internal/devenv/localpg, fsync on), a
// nats-server, 3 scheduler nodes and 3 workers as separate OS processes (each in its own process
// group, its output in <dir>/logs/<instance id>.log), and for the load window:
//
//   - a producer schedules, through agate.<ns>.api.schedule_job only, repeating simple triggers
//     (every 200–500 ms), one-shots spread over the window and non-concurrent `sleep` jobs
//     (300 ms, three triggers each); every fire time falls inside the window, and the schedulers'
//     misfire threshold (10 m) is far above any outage, so every scheduled time must fire once;
//   - a seeded injector does, at a fixed number of random moments: kill -9 or SIGTERM of a
//     scheduler or worker (restarted after a short pause with a new instance id), SIGSTOP of a
//     scheduler past the check-in grace then SIGCONT (a false failover), a restart of
//     nats-server, `pg_ctl stop -m immediate` then start, and the start of a new scheduler node
//     while triggers are due.
//
// After the window it waits until the namespace has no trigger and no fired row left, reads the
// events table and [Check]s: fires due, fired, lost, double fires of one (trigger, scheduled
// time), overlapping executions of a non-concurrent job, fires without a terminal event,
// duplicate executions of one fireId (allowed, attributed to the fault before them), the time
// from a scheduler's death to the release of its claims, and processes that exited without
// being told to (restarted, so the run goes on, but failing it). Then it replays the log against
// the tables, from the latest snapshot (every scheduler's start takes one) and from the start:
// the quiet tables must be what the log says. The seed fixes the load and the fault plan, so a
// failing run can be replayed.
//
// cmd/agatechaos is the command (`make chaos`); TestChaosShort runs two minutes of it in
// `make test`.
package chaos
