package command

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
)

// jobScoped is implemented by a command whose writes touch only rows of the jobs it names: the
// job rows, their triggers and fired rows (the lock protocol's rule 4: a trigger is written only
// under its job's partition). Such a command locks only those jobs' partitions, so commands on
// other jobs, and the acquire and fire transactions of other partitions, do not wait for it.
//
// A command without it locks every partition: calendars (their triggers may be anywhere), and
// commands whose key alone does not say which job they touch (a trigger key, a group, all).
type jobScoped interface {
	lockedJobs() []events.Key
}

// lockedJobs: the job, its own triggers (a listed trigger of another job is only read, to
// reject it) and its fired rows (read to start a trigger BLOCKED).
func (c *ScheduleJob) lockedJobs() []events.Key {
	return []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
}

// lockedJobs: the job and its triggers.
func (c *DeleteJob) lockedJobs() []events.Key {
	return []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
}

// unschedule_trigger (TriggerRef) names a trigger, not its job, so it locks every partition: looking the job
// up before locking would need a second look under the lock (the trigger may have been replaced
// for another job meanwhile), for a command that is rare.

// scope is the lock partitions a command, or a batch, needs: those of jobs, or all of them.
type scope struct {
	all  bool
	jobs []events.Key
}

func scopeOf(c any) scope {
	if s, ok := c.(jobScoped); ok {
		return scope{jobs: s.lockedJobs()}
	}
	return scope{all: true}
}

// union is the scope of two commands applied in one transaction.
func (s scope) union(o scope) scope {
	if s.all || o.all {
		return scope{all: true}
	}
	return scope{jobs: append(s.jobs, o.jobs...)}
}

// lock takes the scope's partitions in ascending order (Locks.Jobs, Locks.All), so batches on
// different nodes cannot deadlock on them.
func (s scope) lock(ctx context.Context, tx pgx.Tx, locks store.Locks) error {
	switch {
	case s.all:
		return locks.All(ctx, tx)
	case len(s.jobs) > 0:
		return locks.Jobs(ctx, tx, s.jobs)
	}
	return nil
}

// lockedJobs: the job (add_job writes only its row).
func (c *AddJob) lockedJobs() []events.Key {
	return []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
}

// lockedJobs: the job and its new trigger (and the paused-group row a new trigger may record,
// which pause and resume commands write under every partition).
func (c *ScheduleTrigger) lockedJobs() []events.Key {
	return []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
}

// lockedJobs: as schedule_trigger.
func (c *TriggerJob) lockedJobs() []events.Key {
	return []events.Key{{Group: c.Job.Group, Name: c.Job.Name}}
}

// The commands naming a trigger (reschedule, pause, resume), a group or all lock every partition,
// as unschedule_trigger does; so does interrupt_job, which writes no trigger but is rare.
