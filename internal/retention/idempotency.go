package retention

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/testsignal"
)

//go:embed idempotency.sql
var idempotencySQL string

var idempotencyQueries = store.ParseQueries(idempotencySQL)

const (
	// IdempotencyWindowDefault remembers a command's outcome for a week, as long as the COMMANDS
	// stream keeps the command by default: a message that JetStream could still deliver (a
	// durable consumer made anew delivers the whole stream) is answered, not applied twice. A
	// producer's retries take seconds to hours, well within it.
	IdempotencyWindowDefault = 7 * 24 * time.Hour
	// PruneBatchDefault is how many rows one statement deletes: a few milliseconds of row locks.
	PruneBatchDefault = 1000
	// pruneIntervalMax is the longest wait between passes; a short window is pruned more often,
	// every hundredth of it (but at most once a second), so rows outlive it by 1 % at most.
	pruneIntervalMax = time.Minute
	pruneIntervalMin = time.Second
)

// Config configures a [Pruner].
type Config struct {
	Namespace string
	// Window is how long a command's outcome and a rejected body are kept. Default
	// IdempotencyWindowDefault.
	Window time.Duration
	// Interval is the wait between passes. Default Window/100, between a second and a minute.
	Interval time.Duration
	// Batch is how many rows one statement deletes. Default PruneBatchDefault.
	Batch  int
	Logger *slog.Logger
}

// Pruner deletes the rows of one namespace older than the idempotency window.
type Pruner struct {
	cfg  Config
	pool *pgxpool.Pool

	TestSignals TestSignals
}

// TestSignals tell tests what the pruner did.
type TestSignals struct {
	Pass testsignal.Signal[Pruned] // a pass ended (what it deleted)
}

// Pruned is what a pass deleted.
type Pruned struct {
	Commands       int64 // rows of commands_seen
	RejectedBodies int64 // rows of rejected_bodies
}

// NewPruner builds a Pruner.
func NewPruner(cfg Config, pool *pgxpool.Pool) *Pruner {
	cfg.Window = cmp.Or(cfg.Window, IdempotencyWindowDefault)
	cfg.Interval = cmp.Or(cfg.Interval, min(max(cfg.Window/100, pruneIntervalMin), pruneIntervalMax))
	cfg.Batch = cmp.Or(cfg.Batch, PruneBatchDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return &Pruner{cfg: cfg, pool: pool}
}

// Run prunes at once and then every Interval until ctx ends. A failed pass (the database
// restarting) is logged and tried again at the next one: pruning can wait.
func (p *Pruner) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		res, err := p.Prune(ctx)
		if err != nil && ctx.Err() == nil {
			p.cfg.Logger.WarnContext(ctx, "pruning remembered commands failed; trying again at the next pass",
				slog.Any("error", err), slog.Duration("next_pass_in", p.cfg.Interval))
		}
		p.TestSignals.Pass.Signal(res)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Prune deletes every row of the namespace older than the window, Batch rows per statement,
// and returns how many it deleted, also when it stopped at an error.
func (p *Pruner) Prune(ctx context.Context) (Pruned, error) {
	var res Pruned
	var err error
	res.Commands, err = p.prune(ctx, "PruneCommandsSeen")
	if err != nil {
		return res, fmt.Errorf("pruning commands_seen: %w", err)
	}
	res.RejectedBodies, err = p.prune(ctx, "PruneRejectedBodies")
	if err != nil {
		return res, fmt.Errorf("pruning rejected_bodies: %w", err)
	}
	if res.Commands > 0 || res.RejectedBodies > 0 {
		p.cfg.Logger.DebugContext(ctx, "pruned remembered commands older than the idempotency window",
			slog.Int64("commands", res.Commands), slog.Int64("rejected_bodies", res.RejectedBodies),
			slog.Duration("window", p.cfg.Window))
	}
	return res, nil
}

// prune runs the named statement until it deletes less than a full batch.
func (p *Pruner) prune(ctx context.Context, query string) (int64, error) {
	var total int64
	for {
		tag, err := p.pool.Exec(ctx, idempotencyQueries.Get(query), p.cfg.Namespace, p.cfg.Window.Microseconds(), p.cfg.Batch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(p.cfg.Batch) {
			return total, nil
		}
	}
}
