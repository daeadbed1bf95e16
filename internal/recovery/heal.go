package recovery

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/outbox"
	"github.com/agatesched/agate/internal/store"
)

// Repair is one stuck trigger the healing scan found and put right.
type Repair struct {
	Trigger events.Key
	From    string // the state it was stuck in
	To      string // the state it was put in; "" when it was deleted
	Reason  string
}

// heal finds triggers stuck in a state nothing will move them out of (Quartz #145, #1516:
// BLOCKED or ACQUIRED forever) and repairs them, one event per repair:
//
//   - BLOCKED (or PAUSED_BLOCKED) while their job has no execution in flight: released;
//   - ACQUIRED with no claim of a live node: back to WAITING;
//   - COMPLETE with no execution in flight: deleted, with the job when it is left without
//     triggers and is not durable.
//
// Each runs under every lock partition, so nothing it reads moves while it repairs.
//
// A cheap look without locks comes first: the locks are taken only when something is stuck.
func (r *Recoverer) heal(ctx context.Context) ([]Repair, error) {
	var stuck bool
	if err := r.pool.QueryRow(ctx, queries.Get("AnyStuck"), r.cfg.Namespace).Scan(&stuck); err != nil {
		return nil, fmt.Errorf("looking for stuck triggers: %w", err)
	}
	if !stuck {
		return nil, nil
	}
	var repairs []Repair
	err := r.outbox.InTx(ctx, func(tx *outbox.Tx) error {
		repairs = nil
		if err := r.cfg.Locks.All(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queries.Get("ForgetOrphanClaims"), r.cfg.Namespace); err != nil {
			return fmt.Errorf("forgetting claims of nodes that left: %w", err)
		}
		for _, q := range []struct{ query, from, to, reason string }{
			{"HealBlocked", "BLOCKED", "WAITING", "blocked with no execution of its job in flight"},
			{"HealAcquired", "ACQUIRED", "WAITING", "acquired with no claim of a live node"},
			{"HealComplete", "COMPLETE", "", "complete with no execution in flight"},
		} {
			rows, err := tx.Query(ctx, queries.Get(q.query), r.cfg.Namespace)
			if err != nil {
				return fmt.Errorf("healing %s triggers: %w", q.from, err)
			}
			keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Repair, error) {
				rep := Repair{From: q.from, To: q.to, Reason: q.reason}
				err := row.Scan(&rep.Trigger.Group, &rep.Trigger.Name, &rep.From)
				if q.to == "WAITING" && rep.From == store.StatePausedBlocked {
					rep.To = store.StatePaused
				}
				return rep, err
			})
			if err != nil {
				return fmt.Errorf("healing %s triggers: %w", q.from, err)
			}
			repairs = append(repairs, keys...)
		}
		if len(repairs) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, queries.Get("DeleteOrphanJobs"), r.cfg.Namespace)
		if err != nil {
			return fmt.Errorf("deleting jobs left without triggers: %w", err)
		}
		jobs, err := pgx.CollectRows(rows, store.ScanKey)
		if err != nil {
			return fmt.Errorf("deleting jobs left without triggers: %w", err)
		}
		now := r.cfg.Now()
		deleted, err := store.JobsDeleted(r.origin, jobs, "no triggers left", now)
		if err != nil {
			return err
		}
		for _, rep := range repairs {
			ev, err := r.origin.Trigger(events.TypeTriggerRepaired, rep.Trigger, now, map[string]any{
				"trigger": rep.Trigger, "from": rep.From, "to": rep.To, "reason": rep.Reason})
			if err != nil {
				return err
			}
			tx.Append(ev)
		}
		tx.Append(deleted...)
		return nil
	})
	for _, rep := range repairs {
		r.cfg.Logger.WarnContext(ctx, "repaired a stuck trigger", slog.String("trigger", rep.Trigger.String()),
			slog.String("from", rep.From), slog.String("to", rep.To), slog.String("reason", rep.Reason))
	}
	return repairs, err
}
