package cli

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger returns a text logger writing to w at level (debug, info, warn or error), the value
// of a binary's --log-level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
