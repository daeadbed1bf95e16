// Package pending reports how many messages wait for JetStream consumers, as the gauge
// agate_consumer_pending_messages{consumer} (README, "Health and metrics"): the consumer infos'
// NumPending, read when metrics are collected rather than tracked, since only JetStream knows it.
package pending

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/telemetry"
)

// Defaults of Config.
const (
	// TTLDefault: scrapes within it share one reading, so that several Prometheus servers (or a
	// short scrape interval) do not each ask JetStream.
	TTLDefault = 5 * time.Second
	// TimeoutDefault bounds one reading, well inside a scrape's timeout.
	TimeoutDefault = 2 * time.Second
)

// Watch names the consumers of one stream to report: every consumer named Name, or, when Prefix
// is set, every consumer whose name starts with Name (the workers' consumers of all job types,
// including those no running worker handles).
type Watch struct {
	Stream string
	Name   string
	Prefix bool
}

// Config configures Register.
type Config struct {
	Watches []Watch
	TTL     time.Duration // default TTLDefault
	Timeout time.Duration // default TimeoutDefault
	Logger  *slog.Logger  // default slog.Default()
	Now     func() time.Time
}

// reader reads the pending counts, at most once per TTL.
type reader struct {
	cfg       Config
	js        jetstream.JetStream
	failLevel slog.Level // of the log line a failed reading writes; Warn unless set

	mu     sync.Mutex
	at     time.Time        // of the last reading, successful or not
	counts map[string]int64 // consumer → NumPending; nil when the last reading failed
}

// Register creates the gauge on mp's meter (nil: the global provider) and observes it until the
// returned function is called. A stream or consumer that does not exist yet is not reported; a
// reading that fails (JetStream away, the timeout) reports nothing until the next one, rather
// than a stale number.
func Register(mp metric.MeterProvider, js jetstream.JetStream, cfg Config) (unregister func(), err error) {
	if cfg.TTL <= 0 {
		cfg.TTL = TTLDefault
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &reader{cfg: cfg, js: js, failLevel: slog.LevelWarn}
	m := telemetry.Meter(mp, "internal/pending")
	g := telemetry.Gauge(m, "agate.consumer.pending.messages", "{message}",
		"Messages a JetStream consumer has not delivered yet (NumPending), by consumer: scheduler-done "+
			"(job outcomes for the schedulers), worker-<job type> (fires for the workers)")
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for c, n := range r.read(ctx) {
			o.ObserveFloat64(g, float64(n), metric.WithAttributes(attribute.String("consumer", c)))
		}
		return nil
	}, g)
	if err != nil {
		return nil, fmt.Errorf("registering the consumer pending gauge: %w", err)
	}
	return func() { _ = reg.Unregister() }, nil
}

// read returns the counts, reading them anew once the last reading is older than the TTL. The
// lock is held while reading, so concurrent scrapes wait for one reading instead of each making
// their own.
func (r *reader) read(ctx context.Context) map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.cfg.Now(); r.at.IsZero() || now.Sub(r.at) >= r.cfg.TTL {
		ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		defer cancel()
		counts, err := r.fetch(ctx)
		if err != nil {
			r.cfg.Logger.Log(ctx, r.failLevel, "reading consumer pending counts failed; not reported", slog.Any("error", err))
		}
		r.at, r.counts = now, counts
	}
	return maps.Clone(r.counts)
}

func (r *reader) fetch(ctx context.Context) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, w := range r.cfg.Watches {
		if w.Prefix {
			if err := eachConsumer(ctx, r.js, w.Stream, w.Name, func(info *jetstream.ConsumerInfo) {
				counts[info.Name] = int64(info.NumPending)
			}); err != nil {
				return nil, err
			}
			continue
		}
		c, err := r.js.Consumer(ctx, w.Stream, w.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue // not created yet: nothing waits
		} else if err != nil {
			return nil, fmt.Errorf("looking up consumer %s on %s: %w", w.Name, w.Stream, err)
		}
		counts[w.Name] = int64(c.CachedInfo().NumPending)
	}
	return counts, nil
}

// eachConsumer calls fn with the info of each consumer of stream whose name starts with prefix,
// from one paged request for all of them; none before the stream exists.
func eachConsumer(ctx context.Context, js jetstream.JetStream, stream, prefix string, fn func(*jetstream.ConsumerInfo)) error {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	} else if err != nil {
		return fmt.Errorf("looking up stream %s: %w", stream, err)
	}
	l := s.ListConsumers(ctx)
	for info := range l.Info() {
		if strings.HasPrefix(info.Name, prefix) {
			fn(info)
		}
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("listing the consumers of %s: %w", stream, err)
	}
	return nil
}
