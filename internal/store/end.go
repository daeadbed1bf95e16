package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
)

// Ended is the fired row of an execution that ended.
type Ended struct {
	Trigger, Job  events.Key
	Nonconcurrent bool
}

// EndExecutions ends the executions with the given fire ids, as Quartz's triggeredJobComplete
// does: their fired rows go, the triggers their non-concurrent jobs blocked are released
// (BLOCKED → WAITING, PAUSED_BLOCKED → PAUSED), COMPLETE triggers whose last execution this was
// are deleted, and so are the non-durable jobs they leave without triggers. It returns the
// executions that ended by fire id (one already ended has no row and is absent) and the
// released triggers. The caller holds the locks of the jobs' partitions.
func EndExecutions(ctx context.Context, tx pgx.Tx, namespace string, fireIDs []uuid.UUID) (map[uuid.UUID]Ended, []events.Key, error) {
	ended := map[uuid.UUID]Ended{}
	if len(fireIDs) == 0 {
		return ended, nil, nil
	}
	rows, err := tx.Query(ctx, queries.Get("EndFired"), fireIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("deleting fired rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var e Ended
		if err := rows.Scan(&id, &e.Trigger.Group, &e.Trigger.Name, &e.Job.Group, &e.Job.Name, &e.Nonconcurrent); err != nil {
			return nil, nil, fmt.Errorf("deleting fired rows: %w", err)
		}
		ended[id] = e
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("deleting fired rows: %w", err)
	}
	if len(ended) == 0 {
		return ended, nil, nil
	}
	released, err := releaseBlocked(ctx, tx, namespace, ended)
	if err != nil {
		return nil, nil, err
	}
	if err := deleteFinished(ctx, tx, namespace, ended); err != nil {
		return nil, nil, err
	}
	return ended, released, nil
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

func deleteFinished(ctx context.Context, tx pgx.Tx, namespace string, ended map[uuid.UUID]Ended) error {
	var tg, tn, states, jg, jn []string
	for _, e := range ended {
		tg, tn, states = append(tg, e.Trigger.Group), append(tn, e.Trigger.Name), append(states, StateComplete)
		jg, jn = append(jg, e.Job.Group), append(jn, e.Job.Name)
	}
	if _, err := tx.Exec(ctx, queries.Get("DeleteCompleteTriggers"), namespace, tg, tn, states); err != nil {
		return fmt.Errorf("deleting completed triggers: %w", err)
	}
	if _, err := tx.Exec(ctx, queries.Get("DeleteFinishedJobs"), namespace, jg, jn); err != nil {
		return fmt.Errorf("deleting finished jobs: %w", err)
	}
	return nil
}
