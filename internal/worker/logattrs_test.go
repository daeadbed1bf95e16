package worker

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
)

// A lazy logger writes what Logger.With writes, through further With and WithGroup calls, and
// asks its handler for nothing while its level is off.
func TestWithLazyWritesWhatWithWrites(t *testing.T) {
	attrs := []slog.Attr{slog.String("job", "g.j"), slog.Int("attempt", 2)}
	logAll := func(log *slog.Logger) {
		log.Info("done", "took", 3)
		log.With("extra", true).Warn("warned", "n", 1)
		log.WithGroup("grp").With("inner", "x").Error("failed", "why", "boom")
		log.Debug("hidden", "n", 4)
	}
	var eager, lazy bytes.Buffer
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}
	args := make([]any, len(attrs))
	for i, a := range attrs {
		args[i] = a
	}
	logAll(slog.New(slog.NewTextHandler(&eager, opts)).With(args...))
	logAll(withLazy(slog.New(slog.NewTextHandler(&lazy, opts)), attrs...))
	if eager.String() != lazy.String() {
		t.Errorf("lazy logger wrote\n%s\nLogger.With wrote\n%s", lazy.String(), eager.String())
	}
	if lazy.Len() == 0 {
		t.Fatal("nothing logged")
	}

	counting := &countingHandler{}
	withLazy(slog.New(counting), attrs...).Debug("off")
	if counting.withAttrs != 0 || counting.handled != 0 {
		t.Errorf("a record below the level cost %d WithAttrs and %d Handle calls", counting.withAttrs, counting.handled)
	}
}

type countingHandler struct{ withAttrs, handled int }

func (h *countingHandler) Enabled(context.Context, slog.Level) bool  { return false }
func (h *countingHandler) Handle(context.Context, slog.Record) error { h.handled++; return nil }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler        { h.withAttrs++; return h }
func (h *countingHandler) WithGroup(string) slog.Handler             { return h }
