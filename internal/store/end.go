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
	// Events are the TriggerReleased, TriggerCompleted and JobDeleted events of the changes, to be
	// logged after the outcomes that ended the executions.
	Events []events.Event
}

// EndExecutions ends the executions with the given fire ids, as Quartz's triggeredJobComplete
// does: their fired rows go, the triggers their non-concurrent jobs blocked are released
// (BLOCKED → WAITING, PAUSED_BLOCKED → PAUSED), COMPLETE triggers whose last execution this was
// are deleted, and so are the non-durable jobs they leave without triggers. The caller holds
// the locks of the jobs' partitions.
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
// but their fired row: executions of concurrent jobs whose trigger is there and not COMPLETE
// (a repeating trigger's). No other transaction changes what such an end depends on, so the
// caller needs no partition lock: the fired row's deletion makes the end happen once, and a
// trigger that becomes COMPLETE meanwhile completes with its last execution, whose own end then
// goes through EndExecutions. It returns the executions it ended; the others are left for
// EndExecutions under the locks.
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

// deleteFinished deletes the COMPLETE triggers of the ended executions and the jobs they leave
// without triggers, and returns a TriggerCompleted or JobDeleted event for each. Only the jobs
// of the triggers deleted here can be left without one: every other step that deletes a
// trigger (unschedule_trigger, delete_job, recovery's repairs) deletes the job it orphans
// itself. So repeating triggers, which do not complete, cost no probe of their jobs.
func deleteFinished(ctx context.Context, tx pgx.Tx, origin events.Origin, ended map[uuid.UUID]Ended, now time.Time) ([]events.Event, error) {
	var tg, tn, states []string
	for _, e := range ended {
		tg, tn, states = append(tg, e.Trigger.Group), append(tn, e.Trigger.Name), append(states, StateComplete)
	}
	rows, err := tx.Query(ctx, queries.Get("DeleteCompleteTriggers"), origin.Namespace, tg, tn, states)
	if err != nil {
		return nil, fmt.Errorf("deleting completed triggers: %w", err)
	}
	type deleted struct{ trigger, job events.Key }
	completed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (deleted, error) {
		var d deleted
		err := row.Scan(&d.trigger.Group, &d.trigger.Name, &d.job.Group, &d.job.Name)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("deleting completed triggers: %w", err)
	}
	evs := make([]events.Event, 0, len(completed))
	var jg, jn []string
	seen := make(map[events.Key]bool, len(completed))
	for _, d := range completed {
		ev, err := origin.Trigger(events.TypeTriggerCompleted, d.trigger, now, map[string]any{"trigger": d.trigger})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
		if !seen[d.job] {
			seen[d.job] = true
			jg, jn = append(jg, d.job.Group), append(jn, d.job.Name)
		}
	}
	if len(jg) == 0 {
		return evs, nil
	}
	rows, err = tx.Query(ctx, queries.Get("DeleteFinishedJobs"), origin.Namespace, jg, jn)
	if err != nil {
		return nil, fmt.Errorf("deleting finished jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, ScanKey)
	if err != nil {
		return nil, fmt.Errorf("deleting finished jobs: %w", err)
	}
	more, err := JobsDeleted(origin, jobs, "no triggers left", now)
	return append(evs, more...), err
}

// JobsDeleted builds a JobDeleted event for each non-durable job deleted because no trigger
// is left to fire it, saying why.
func JobsDeleted(origin events.Origin, jobs []events.Key, reason string, now time.Time) ([]events.Event, error) {
	evs := make([]events.Event, 0, len(jobs))
	for _, k := range jobs {
		ev, err := origin.Job(events.TypeJobDeleted, k, now, map[string]any{"job": k, "reason": reason})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
