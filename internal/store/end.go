package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
)

// Ended is the fired row of an execution that ended.
type Ended struct {
	Trigger, Job  events.Key
	Nonconcurrent bool
}

// Ending is what EndExecutions did.
type Ending struct {
	// Ended holds the executions that ended by fire id (one already ended has no row and is absent).
	Ended map[uuid.UUID]Ended
	// Released counts the triggers released.
	Released int
	// Events are the TriggerReleased and JobDeleted events of the changes, to be
	// logged after the outcomes that ended the executions.
	Events []events.Event
}

// EndExecutions ends the executions with the given fire ids, as Quartz's triggeredJobComplete
// does: their fired rows go, the triggers their non-concurrent jobs blocked are released
// (BLOCKED → WAITING, PAUSED_BLOCKED → PAUSED), and the non-durable jobs left with no trigger
// and no execution are deleted (a trigger's last fire deleted the trigger). The caller holds the
// locks of the jobs' partitions.
func EndExecutions(ctx context.Context, tx pgx.Tx, origin events.Origin, fireIDs []uuid.UUID, now time.Time) (Ending, error) {
	res := Ending{Ended: map[uuid.UUID]Ended{}}
	if len(fireIDs) == 0 {
		return res, nil
	}
	var err error
	if res.Ended, err = endFired(ctx, tx, "EndFired", fireIDs); err != nil || len(res.Ended) == 0 {
		return res, err
	}
	released, err := releaseBlocked(ctx, tx, origin.Namespace, res.Ended)
	if err != nil {
		return res, err
	}
	res.Released = len(released)
	if res.Events, err = origin.Released(released, events.ReleaseJobCompleted, now, nil); err != nil {
		return res, err
	}
	finished, err := deleteFinished(ctx, tx, origin, res.Ended, now)
	res.Events = append(res.Events, finished...)
	return res, err
}

// EndRepeating ends those of the executions with the given fire ids whose end changes nothing
// but their fired row: executions of concurrent jobs whose trigger is there, still of the same
// job, and not COMPLETE (a repeating trigger's). No other transaction changes what such an end
// depends on, so the caller needs no partition lock: the fired row's deletion makes the end
// happen once, and the job of a trigger deleted meanwhile stays until its last execution,
// whose own end goes through EndExecutions. It returns the executions it ended; the others are
// left for EndExecutions under the locks.
func EndRepeating(ctx context.Context, tx pgx.Tx, fireIDs []uuid.UUID) (map[uuid.UUID]Ended, error) {
	if len(fireIDs) == 0 {
		return map[uuid.UUID]Ended{}, nil
	}
	return endFired(ctx, tx, "EndRepeatingFired", fireIDs)
}

// endFired runs query, which deletes fired rows by fire id and returns them.
func endFired(ctx context.Context, tx pgx.Tx, query string, fireIDs []uuid.UUID) (map[uuid.UUID]Ended, error) {
	rows, err := tx.Query(ctx, queries.Get(query), fireIDs)
	if err != nil {
		return nil, fmt.Errorf("deleting fired rows: %w", err)
	}
	defer rows.Close()
	ended := map[uuid.UUID]Ended{}
	for rows.Next() {
		var id uuid.UUID
		var e Ended
		if err := rows.Scan(&id, &e.Trigger.Group, &e.Trigger.Name, &e.Job.Group, &e.Job.Name, &e.Nonconcurrent); err != nil {
			return nil, fmt.Errorf("deleting fired rows: %w", err)
		}
		ended[id] = e
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("deleting fired rows: %w", err)
	}
	return ended, nil
}

func releaseBlocked(ctx context.Context, tx pgx.Tx, namespace string, ended map[uuid.UUID]Ended) ([]events.Key, error) {
	var g, n []string
	for _, e := range ended {
		if e.Nonconcurrent {
			g, n = append(g, e.Job.Group), append(n, e.Job.Name)
		}
	}
	if len(g) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, queries.Get("ReleaseBlocked"), namespace, g, n)
	if err != nil {
		return nil, fmt.Errorf("releasing blocked triggers: %w", err)
	}
	keys, err := pgx.CollectRows(rows, ScanKey)
	if err != nil {
		return nil, fmt.Errorf("releasing blocked triggers: %w", err)
	}
	return keys, nil
}

// deleteFinished deletes the non-durable jobs of the ended executions that are left with no
// trigger and no other execution in flight, and returns a JobDeleted event for each, as
// Quartz's removeTrigger deletes a job with its last trigger. A trigger's last fire deleted the
// trigger already (internal/fire's UpdateTriggers); the job stays until that execution ends.
func deleteFinished(ctx context.Context, tx pgx.Tx, origin events.Origin, ended map[uuid.UUID]Ended, now time.Time) ([]events.Event, error) {
	var jg, jn []string
	seen := make(map[events.Key]bool, len(ended))
	for _, e := range ended {
		if !seen[e.Job] {
			seen[e.Job] = true
			jg, jn = append(jg, e.Job.Group), append(jn, e.Job.Name)
		}
	}
	rows, err := tx.Query(ctx, queries.Get("DeleteFinishedJobs"), origin.Namespace, jg, jn)
	if err != nil {
		return nil, fmt.Errorf("deleting finished jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, ScanKey)
	if err != nil {
		return nil, fmt.Errorf("deleting finished jobs: %w", err)
	}
	return JobsDeleted(origin, jobs, "no triggers left", now)
}

// JobsDeleted builds a JobDeleted event for each non-durable job deleted because no trigger
// is left to fire it, saying why.
func JobsDeleted(origin events.Origin, jobs []events.Key, reason string, now time.Time) ([]events.Event, error) {
	evs := make([]events.Event, 0, len(jobs))
	for _, k := range jobs {
		ev, err := origin.Job(events.TypeJobDeleted, k, now, events.JobGone{Job: k, Reason: reason})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
