package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
)

// Defaults of the Config fields that say when an execution is abandoned. The first two are the
// workers' own defaults (--max-deliver, --job-timeout).
const (
	WorkerMaxDeliverDefault = 5
	WorkerJobTimeoutDefault = 5 * time.Minute
	AbandonGraceDefault     = 10 * time.Minute
	overdueBatch            = 100
)

// overdue is an execution with no outcome past its deadline, with the JobFired it was last
// fired with.
type overdue struct {
	fireID           uuid.UUID
	job              events.Key
	requestsRecovery bool
	recovering       bool
	fired            events.JobFired
	traceParent      string
	jobType          string
	published        bool // the outbox sweep has passed its JobFired: it is on the bus
}

// Abandonment is what the scan did with one overdue execution.
type Abandonment struct {
	FireID  uuid.UUID
	Job     events.Key
	Refired bool // fired again with recovering: true (its job requests recovery); otherwise failed finally
}

// abandon ends executions that can no longer finish. Workers report every outcome, and a fire
// whose last delivery is lost is reported by the worker that hears JetStream's max-deliveries
// advisory; but when no worker hears it (all were down), or a worker keeps a fire past every
// timeout, nothing ever ends the execution, and a non-concurrent job's triggers stay BLOCKED.
//
// An execution is overdue when it has had no outcome for WorkerMaxDeliver attempts of its job's
// timeout plus AbandonGrace since it was fired. It is abandoned only when its JobFired is on the
// bus and the workers' consumer of its job type has been handed every fire published (no
// pending message): a fire still queued for a worker (none running for its type, or a backlog)
// is waiting, not lost. An abandoned execution whose job requests recovery is fired once more
// with the same fire id and recovering: true (Quartz's recovery); otherwise, or the second time,
// it ends with JobFailed{final: true}, which releases its trigger like any final outcome.
func (r *Recoverer) abandon(ctx context.Context) ([]Abandonment, error) {
	if r.cfg.JetStream == nil {
		return nil, nil
	}
	rows, err := r.pool.Query(ctx, queries.Get("Overdue"), r.cfg.Namespace, r.cfg.WorkerMaxDeliver,
		r.cfg.WorkerJobTimeout.Milliseconds(), r.cfg.AbandonGrace.Milliseconds(), overdueBatch)
	if err != nil {
		return nil, fmt.Errorf("looking for overdue executions: %w", err)
	}
	all, err := pgx.CollectRows(rows, r.scanOverdue)
	if err != nil {
		return nil, fmt.Errorf("looking for overdue executions: %w", err)
	}
	var due []overdue
	handed := map[string]bool{} // job type → every published fire was handed to a worker
	for _, o := range all {
		if !o.published {
			continue // the relay has not caught up (NATS down): the workers have not seen it yet
		}
		ok, seen := handed[o.jobType]
		if !seen {
			if ok, err = r.allDelivered(ctx, o.jobType); err != nil {
				return nil, err
			}
			handed[o.jobType] = ok
		}
		if ok {
			due = append(due, o)
		}
	}
	if len(due) == 0 {
		return nil, nil
	}
	var done []Abandonment
	err = r.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		done = nil
		jobs := make([]events.Key, len(due))
		for i, o := range due {
			jobs[i] = o.job
		}
		if err := r.cfg.Locks.Jobs(ctx, tx, jobs); err != nil {
			return err
		}
		var failed []overdue
		for _, o := range due {
			if !o.requestsRecovery || o.recovering {
				failed = append(failed, o)
				continue
			}
			ok, err := r.refire(ctx, tx, o)
			if err != nil {
				return err
			}
			if ok {
				done = append(done, Abandonment{FireID: o.fireID, Job: o.job, Refired: true})
			}
		}
		ended, err := r.fail(ctx, tx, failed)
		done = append(done, ended...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("abandoning overdue executions: %w", err)
	}
	for _, a := range done {
		msg := "an execution had no outcome long past its job's timeout; it failed finally and its trigger was released"
		if a.Refired {
			msg = "an execution had no outcome long past its job's timeout; its job requests recovery, so it was fired again"
		}
		r.cfg.Logger.WarnContext(ctx, msg, slog.String("fire_id", a.FireID.String()), slog.String("job", a.Job.String()))
	}
	return done, nil
}

func (r *Recoverer) scanOverdue(row pgx.CollectableRow) (overdue, error) {
	var o overdue
	var data []byte
	var subject string
	if err := row.Scan(&o.fireID, &o.job.Group, &o.job.Name, &o.requestsRecovery, &o.recovering, &data,
		&o.traceParent, &subject, &o.published); err != nil {
		return o, err
	}
	if err := json.Unmarshal(data, &o.fired); err != nil {
		return o, fmt.Errorf("reading the JobFired of fire %s from the log: %w", o.fireID, err)
	}
	o.jobType = strings.TrimPrefix(subject, events.Subjects(r.cfg.Namespace).Fired(""))
	return o, nil
}

// allDelivered reports whether the workers' consumer of jobType has been handed every fire on
// the bus. Without a consumer no worker of the type ever ran: the fires wait for one.
func (r *Recoverer) allDelivered(ctx context.Context, jobType string) (bool, error) {
	c, err := r.cfg.JetStream.Consumer(ctx, events.StreamFired(r.cfg.Namespace), events.WorkerDurable(jobType))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the state of the workers' consumer of job type %q: %w", jobType, err)
	}
	info := c.CachedInfo()
	return info.NumPending == 0, nil
}

// refire publishes the execution's JobFired again, with the same fire id and recovering: true,
// as a new message (a new event id, so that JetStream's de-duplication lets it through).
func (r *Recoverer) refire(ctx context.Context, tx *outbox.Tx, o overdue) (bool, error) {
	now := r.cfg.Now()
	tag, err := tx.Exec(ctx, queries.Get("Refire"), o.fireID, now)
	if err != nil {
		return false, fmt.Errorf("marking fire %s as recovering: %w", o.fireID, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // it ended meanwhile
	}
	jf := o.fired
	jf.Recovering, jf.FiredTime = true, now.UTC()
	ev, err := events.New(events.TypeJobFired, r.origin.Source(), events.AggregateJob, o.job.String(),
		events.Subjects(r.cfg.Namespace).Fired(o.jobType), now, jf)
	if err != nil {
		return false, err
	}
	ev.TraceParent = o.traceParent
	tx.Append(ev)
	return true, nil
}

// fail ends executions with JobFailed{final: true}, as a worker's final failure would: the
// event goes on the completion subject too, where the completion consumer finds the execution
// already ended and records nothing more.
func (r *Recoverer) fail(ctx context.Context, tx *outbox.Tx, os []overdue) ([]Abandonment, error) {
	if len(os) == 0 {
		return nil, nil
	}
	ids := make([]uuid.UUID, len(os))
	for i, o := range os {
		ids[i] = o.fireID
	}
	now := r.cfg.Now()
	end, err := store.EndExecutions(ctx, tx, r.origin, ids, now)
	if err != nil {
		return nil, err
	}
	ended := end.Ended
	var done []Abandonment
	for _, o := range os {
		if _, ok := ended[o.fireID]; !ok {
			continue
		}
		msg := fmt.Sprintf("no outcome within %d attempts of the job's timeout plus %s after the fire: "+
			"the execution is abandoned (its worker stopped and no other reported it)", r.cfg.WorkerMaxDeliver, r.cfg.AbandonGrace)
		result := events.JobResult{
			FireID: o.fireID, Job: o.fired.Job, Trigger: o.fired.Trigger, ScheduledTime: o.fired.ScheduledTime,
			Worker: r.cfg.InstanceID, StartedTime: now.UTC(), FinishedTime: now.UTC(), Attempt: r.cfg.WorkerMaxDeliver,
			Error: &events.JobError{Message: msg, Retryable: true, Final: true},
		}
		ev, err := events.New(events.TypeJobFailed, r.origin.Source(), events.AggregateJob, o.job.String(),
			events.Subjects(r.cfg.Namespace).Done(o.jobType), now, result)
		if err != nil {
			return nil, err
		}
		ev.TraceParent = o.traceParent
		tx.Append(ev)
		done = append(done, Abandonment{FireID: o.fireID, Job: o.job})
	}
	tx.Append(end.Events...)
	return done, nil
}
