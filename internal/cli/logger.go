package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger returns a text logger writing to w at level (debug, info, warn or error), the value
// of a binary's --log-level, and makes it the default logger, so that what a package logs before
// it is handed a logger (store's wait for PostgreSQL) looks the same.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
	slog.SetDefault(log)
	return log, nil
}
