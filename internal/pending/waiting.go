package pending

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
)

// WaitingTTL is how long one reading of the fires waiting for a worker is used.
const WaitingTTL = 50 * time.Millisecond

// Waiting tells how many messages of fires of a namespace wait for a worker (each a fire, or a
// batch of them): the sum of NumPending over its workers' consumers. Fires delivered and not
// acknowledged yet are not counted: a long job holds its fire for minutes without anyone being
// behind. A reading is used for WaitingTTL, so asking often costs one JetStream request per TTL.
type Waiting struct {
	r *reader
}

// NewWaiting returns a Waiting for namespace ns. log receives failed readings at debug level
// (the caller goes on as if nothing waited); nil is slog.Default().
func NewWaiting(js jetstream.JetStream, ns string, log *slog.Logger) *Waiting {
	if log == nil {
		log = slog.Default()
	}
	return &Waiting{r: &reader{js: js, failLevel: slog.LevelDebug, cfg: Config{
		Watches: []Watch{{Stream: events.StreamFired(ns), Name: events.WorkerDurablePrefix, Prefix: true}},
		TTL:     WaitingTTL, Timeout: TimeoutDefault, Logger: log, Now: time.Now,
	}}}
}

// AtLeast reports whether n messages of fires or more wait for a worker.
func (w *Waiting) AtLeast(ctx context.Context, n int) bool {
	var sum int64
	for _, c := range w.r.read(ctx) {
		sum += c
	}
	return sum >= int64(n)
}
