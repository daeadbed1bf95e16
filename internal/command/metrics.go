package command

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/apierr"
	"github.com/agatesched/agate/internal/telemetry"
)

// metrics are the command step's instruments (README, "Health and metrics").
type metrics struct {
	commands metric.Int64Counter
}

// codeOK is the code attribute of a command applied.
const codeOK = "ok"

// commandAttrs holds the attribute set of every command name and outcome code, made once. A
// name the scheduler does not know is counted as "unknown": names come from producers, and
// each would otherwise be a series of its own.
var commandAttrs = map[string]map[string]metric.MeasurementOption{}

func init() {
	codes := []string{codeOK, apierr.CodeInvalidArgument, apierr.CodeNotFound, apierr.CodeAlreadyExists,
		apierr.CodeFailedPrecondition, apierr.CodeUnavailable, apierr.CodeInternal}
	for _, name := range append(Names(), "unknown") {
		commandAttrs[name] = map[string]metric.MeasurementOption{}
		for _, code := range codes {
			commandAttrs[name][code] = telemetry.Attrs(attribute.String("command", name), attribute.String("code", code))
		}
	}
}

func newMetrics(mp metric.MeterProvider) metrics {
	m := telemetry.Meter(mp, "internal/command")
	return metrics{commands: telemetry.Counter(m, "agate.scheduler.commands", "{command}",
		"Commands this node answered, by command and outcome code (ok, or the error code of docs/contract.md; "+
			"commands the scheduler does not know are counted as unknown)")}
}

// answered counts the outcomes of a batch's commands, one Add per command name and code: the
// SDK's work per Add (its attribute handling) was 6 % of a scheduler's CPU at one per command.
func (m metrics) answered(ctx context.Context, items []*item) {
	type series struct{ cmd, code string }
	counts := map[series]int64{}
	for _, it := range items {
		code := codeOK
		if it.out.Error != nil {
			code = it.out.Error.Code
		}
		counts[series{it.cmd, code}]++
	}
	for s, n := range counts {
		byCode, ok := commandAttrs[s.cmd]
		if !ok {
			s.cmd, byCode = "unknown", commandAttrs["unknown"]
		}
		o, ok := byCode[s.code]
		if !ok { // a code added without its set: counted all the same
			o = telemetry.Attrs(attribute.String("command", s.cmd), attribute.String("code", s.code))
		}
		m.commands.Add(ctx, n, o)
	}
}

// SetMeterProvider has the handler record its metrics with mp (nil: the global provider). Call
// it before the handler is used.
func (h *Handler) SetMeterProvider(mp metric.MeterProvider) { h.metrics = newMetrics(mp) }
