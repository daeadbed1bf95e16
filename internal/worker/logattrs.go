package worker

import (
	"context"
	"log/slog"
	"slices"
)

// withLazy returns log with attrs added as Logger.With adds them, except that they reach log's
// handler only when a record is logged. Logger.With has a TextHandler format its attributes at
// once: a logger per job built that way was 14 % of a worker's CPU in a burst in which nothing
// was logged (docs/performance-history.md).
func withLazy(log *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(lazyAttrs{next: log.Handler(), attrs: attrs})
}

// lazyAttrs holds attributes for next until a record is handled.
type lazyAttrs struct {
	next  slog.Handler
	attrs []slog.Attr
}

func (h lazyAttrs) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h lazyAttrs) Handle(ctx context.Context, r slog.Record) error {
	return h.next.WithAttrs(h.attrs).Handle(ctx, r)
}

func (h lazyAttrs) WithAttrs(attrs []slog.Attr) slog.Handler {
	return lazyAttrs{next: h.next, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h lazyAttrs) WithGroup(name string) slog.Handler {
	return h.next.WithAttrs(h.attrs).WithGroup(name)
}
