package pending

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WaitingTTL is how long one reading of the fires waiting for a worker is used.
const WaitingTTL = 50 * time.Millisecond

// Waiting tells how many fires of a namespace wait for a worker: the sum of Pending over its
// workers' consumers (WorkerConsumers). Fires delivered and not acknowledged yet are not
// counted: a long job holds its fire for minutes without anyone being behind. A reading is
// used for WaitingTTL, so asking often costs one JetStream request per TTL.
type Waiting struct {
	js  jetstream.JetStream
	ns  string
	log *slog.Logger
	now func() time.Time

	mu sync.Mutex
	at time.Time // of the last reading
	n  uint64    // its sum; 0 when it failed
}

// NewWaiting returns a Waiting for namespace ns. log receives failed readings at debug level
// (the caller goes on as if nothing waited); nil is slog.Default().
func NewWaiting(js jetstream.JetStream, ns string, log *slog.Logger) *Waiting {
	if log == nil {
		log = slog.Default()
	}
	return &Waiting{js: js, ns: ns, log: log, now: time.Now}
}

// AtLeast reports whether n fires or more wait for a worker.
func (w *Waiting) AtLeast(ctx context.Context, n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := w.now(); w.at.IsZero() || now.Sub(w.at) >= WaitingTTL {
		ctx, cancel := context.WithTimeout(ctx, TimeoutDefault)
		defer cancel()
		list, err := WorkerConsumers(ctx, w.js, w.ns)
		if err != nil {
			w.log.DebugContext(ctx, "reading the fires that wait for a worker failed", slog.Any("error", err))
		}
		w.at, w.n = now, 0
		for _, c := range list {
			w.n += c.Pending
		}
	}
	return w.n >= uint64(max(n, 0))
}
