package command

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// The router's logger writes what its level lets through, also from a logger made by With, and
// maps the router's Info lines to Debug.
func TestRouterLoggerKeepsLevels(t *testing.T) {
	for _, c := range []struct {
		level slog.Level
		want  []string
	}{
		{slog.LevelInfo, []string{"error line"}},
		{slog.LevelDebug, []string{"debug line", "info line", "error line"}},
		{watermill.LevelTrace, []string{"trace line", "debug line", "info line", "error line"}},
	} {
		var buf bytes.Buffer
		l := routerLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level}))).
			With(watermill.LogFields{"handler": "commands"})
		l.Trace("trace line", watermill.LogFields{"k": 1})
		l.Debug("debug line", nil)
		l.Info("info line", nil)
		l.Error("error line", errors.New("boom"), nil)
		out := buf.String()
		if n := strings.Count(out, "\n"); n != len(c.want) {
			t.Errorf("level %v: %d lines, want %v:\n%s", c.level, n, c.want, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) || !strings.Contains(out, "handler=commands") {
				t.Errorf("level %v: no %q with the With field in:\n%s", c.level, w, out)
			}
		}
	}
}
