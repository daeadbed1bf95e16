package recovery

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the recoverer's instruments (README, "Health and metrics"). Each counts what a
// committed transaction of this node did.
type metrics struct {
	failedNodes metric.Int64Counter
	released    metric.Int64Counter
	misfires    metric.Int64Counter
	repairs     metric.Int64Counter
	abandoned   metric.Int64Counter
	fenced      metric.Int64Counter
}

// Attribute sets, made once.
var (
	releasedAttrs = map[string]metric.MeasurementOption{
		events.ReleaseNodeFailed: telemetry.Attrs(attribute.String("reason", events.ReleaseNodeFailed)),
		events.ReleaseEarlierRun: telemetry.Attrs(attribute.String("reason", events.ReleaseEarlierRun)),
	}
	repairAttrs   = map[string]metric.MeasurementOption{}
	refiredAttrs  = telemetry.Attrs(attribute.String("outcome", "refired"))
	abandonAttrs  = telemetry.Attrs(attribute.String("outcome", "failed"))
	repairStates  = []string{store.StateBlocked, store.StatePausedBlocked, store.StateAcquired, store.StateComplete}
	unknownRepair = telemetry.Attrs(attribute.String("state", "other"))
)

func init() {
	for _, s := range repairStates {
		repairAttrs[s] = telemetry.Attrs(attribute.String("state", s))
	}
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "internal/recovery")
	return metrics{
		failedNodes: telemetry.Counter(m, "agate.scheduler.recovery.nodes", "{node}",
			"Scheduler nodes this node found failed (silent past the check-in grace) and recovered"),
		released: telemetry.Counter(m, "agate.scheduler.recovery.released", "{trigger}",
			"Claims recovery gave back to WAITING: of failed nodes (reason node failed) or left by an earlier run of this node (reason earlier run)"),
		misfires: telemetry.Counter(m, "agate.scheduler.misfires", "{trigger}",
			"Triggers found later than --misfire-threshold whose misfire instruction this node applied, by instruction"),
		repairs: telemetry.Counter(m, "agate.scheduler.repairs", "{trigger}",
			"Triggers found stuck in a state nothing would move them out of, and repaired, by the state they were stuck in"),
		abandoned: telemetry.Counter(m, "agate.scheduler.abandoned", "{execution}",
			"Executions with no outcome long past their job's timeout: fired again (outcome refired, the job requests recovery) or failed finally"),
		fenced: telemetry.Counter(m, "agate.scheduler.fenced", "{event}",
			"Times this node found the cluster had declared it failed (it stops claiming and rejoins)"),
	}
}

func (m metrics) recovered(ctx context.Context, failed []string, released int) {
	if len(failed) > 0 {
		m.failedNodes.Add(ctx, int64(len(failed)))
	}
	if released > 0 {
		reason := events.ReleaseNodeFailed
		if len(failed) == 0 {
			reason = events.ReleaseEarlierRun
		}
		m.released.Add(ctx, int64(released), releasedAttrs[reason])
	}
}

// misfired counts the misfire instructions applied, by instruction (a handful of names: the
// attribute sets are made per batch, not per fire).
func (m metrics) misfired(ctx context.Context, byInstruction map[string]int64) {
	for instr, n := range byInstruction {
		m.misfires.Add(ctx, n, telemetry.Attrs(attribute.String("instruction", instr)))
	}
}

func (m metrics) repaired(ctx context.Context, repairs []Repair) {
	for _, r := range repairs {
		o, ok := repairAttrs[r.From]
		if !ok {
			o = unknownRepair
		}
		m.repairs.Add(ctx, 1, o)
	}
}

func (m metrics) abandonedExecutions(ctx context.Context, done []Abandonment) {
	for _, a := range done {
		if a.Refired {
			m.abandoned.Add(ctx, 1, refiredAttrs)
		} else {
			m.abandoned.Add(ctx, 1, abandonAttrs)
		}
	}
}

// SetMeterProvider has the recoverer record its metrics with mp (nil: the global provider).
// Call it before Join.
func (r *Recoverer) SetMeterProvider(mp metric.MeterProvider) { r.metrics = newMetrics(mp) }
