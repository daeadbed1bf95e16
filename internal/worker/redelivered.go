package worker

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/agatesched/agate/client"
	"github.com/agatesched/agate/internal/events"
)

// askTimeout bounds the wait for a scheduler's answer to which fires of a batch still run.
const askTimeout = 2 * time.Second

// unended returns the fires of bodies, a batch delivered again, whose executions have not ended:
// the ones the scheduler nodes still list as executing (the executing query, by fire id). A batch
// is delivered again whole (its worker died, or stopped, before every fire in it ended), and
// without asking, the fires of it that had ended would run a second time. A fire not listed has
// its final outcome recorded (or was abandoned): running it again changes nothing but the world
// outside. When no node answers, every fire runs again (at-least-once), as the log says. A body
// that does not decode is kept, for fire to drop with its error.
func (w *Worker) unended(ctx context.Context, typ string, bodies [][]byte) [][]byte {
	ids := make([]uuid.UUID, 0, len(bodies))
	of := make([]uuid.UUID, len(bodies))
	for i, b := range bodies {
		var f events.JobFired
		if _, err := events.Decode(b, &f); err == nil && f.FireID != uuid.Nil {
			of[i] = f.FireID
			ids = append(ids, f.FireID)
		}
	}
	running, err := w.executing(ctx, ids)
	if err != nil {
		w.log.WarnContext(ctx, "could not ask the scheduler which fires of a batch delivered again still run; running them all",
			"type", typ, "fires", len(bodies), "error", err)
		return bodies
	}
	kept := bodies[:0:0]
	for i, b := range bodies {
		if of[i] != uuid.Nil && !slices.Contains(running, of[i]) {
			w.log.InfoContext(ctx, "not running again a fire of a batch delivered again: its execution has ended",
				"type", typ, "fire_id", of[i])
			continue
		}
		kept = append(kept, b)
	}
	return kept
}

// executing asks the scheduler nodes which of ids are executions in flight.
func (w *Worker) executing(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, askTimeout)
	defer cancel()
	c := client.New(w.js.Conn(), client.Options{Namespace: w.cfg.Namespace, RequestTimeout: askTimeout, RetryFor: askTimeout})
	var res struct {
		Executions []struct {
			FireID uuid.UUID `json:"fireId"`
		} `json:"executions"`
	}
	if err := c.Query(ctx, "executing", map[string]any{"fireIds": ids, "limit": len(ids)}, &res); err != nil {
		return nil, err
	}
	out := make([]uuid.UUID, len(res.Executions))
	for i, x := range res.Executions {
		out[i] = x.FireID
	}
	return out, nil
}
