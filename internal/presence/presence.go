// Package presence tells the schedulers which worker processes run. Each worker announces itself
// on agate.<ns>.presence.worker every interval, and once more when it stops; a scheduler's
// Roster keeps the workers heard from lately, with how long ago. It is core NATS, not a stream:
// presence is about now, and the event log is not burdened with heartbeats.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/events"
)

// IntervalDefault is how often a worker announces itself.
const IntervalDefault = 5 * time.Second

// missed is how many announcements in a row a worker may miss before a roster drops it.
const missed = 3

// Worker is a worker process as it announces itself.
type Worker struct {
	Instance    string    `json:"instance"`
	JobTypes    []string  `json:"jobTypes"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"inFlight"` // jobs running when it announced itself
	Started     time.Time `json:"started"`
	Interval    string    `json:"interval"` // how often it announces itself
	// Stopping is its last announcement: it drains and goes.
	Stopping bool `json:"stopping,omitempty"`
}

// Announce publishes the worker's presence on ns's subject every interval until ctx ends, then
// once with Stopping set. state says what to announce each time.
func Announce(ctx context.Context, nc *nats.Conn, ns string, interval time.Duration, log *slog.Logger, state func() Worker) {
	subject := events.Subjects(ns).WorkerPresence()
	say := func(stopping bool) {
		w := state()
		w.Interval, w.Stopping = interval.String(), stopping
		body, _ := json.Marshal(w) // strings, numbers and a time: always encodes
		// A closed connection is the process stopping: nothing to say, nobody to say it to.
		if err := nc.Publish(subject, body); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			log.WarnContext(ctx, "announcing this worker's presence failed", slog.Any("error", err))
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		say(false)
		select {
		case <-ctx.Done():
			say(true)
			_ = nc.Flush()
			return
		case <-t.C:
		}
	}
}

// Seen is a worker as a roster knows it: its last announcement and when it came.
type Seen struct {
	Worker
	LastSeen  time.Time `json:"lastSeen"`
	SinceSeen string    `json:"sinceSeen"`
}

// Roster keeps the workers of a namespace heard from lately.
type Roster struct {
	now func() time.Time
	sub *nats.Subscription

	mu      sync.Mutex
	workers map[string]Seen
}

// NewRoster returns an empty roster reading the clock now (time.Now when nil); Watch fills one.
func NewRoster(now func() time.Time) *Roster {
	if now == nil {
		now = time.Now
	}
	return &Roster{now: now, workers: map[string]Seen{}}
}

// Watch subscribes a new roster to ns's announcements; Stop ends it.
func Watch(nc *nats.Conn, ns string) (*Roster, error) {
	r := NewRoster(nil)
	sub, err := nc.Subscribe(events.Subjects(ns).WorkerPresence(), func(m *nats.Msg) {
		var w Worker
		if json.Unmarshal(m.Data, &w) == nil && w.Instance != "" {
			r.Observe(w)
		}
	})
	if err != nil {
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// Stop ends the roster's subscription.
func (r *Roster) Stop() {
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
	}
}

// Observe records an announcement.
func (r *Roster) Observe(w Worker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.Stopping {
		delete(r.workers, w.Instance)
		return
	}
	r.workers[w.Instance] = Seen{Worker: w, LastSeen: r.now().UTC()}
}

// Workers lists the workers heard from within a few of their intervals, by instance.
func (r *Roster) Workers() []Seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	out := make([]Seen, 0, len(r.workers))
	for id, s := range r.workers {
		every, err := time.ParseDuration(s.Interval)
		if err != nil || every <= 0 {
			every = IntervalDefault
		}
		since := now.Sub(s.LastSeen)
		if since > missed*every {
			delete(r.workers, id)
			continue
		}
		s.SinceSeen = since.Round(time.Millisecond).String()
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b Seen) int { return strings.Compare(a.Instance, b.Instance) })
	return out
}
