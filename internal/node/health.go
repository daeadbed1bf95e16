package node

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/health"
	"github.com/agatesched/agate/internal/store"
)

// Health is a node's readiness, for the HTTP listener's /readyz. Give a new one to
// Config.Health: Run fills it in as it starts, and its probes say what is not ready yet.
//
// A node is ready when the database answers, JetStream answers for the namespace's FIRED stream
// (what every fire is published to), the node is a member of the cluster (it joined, and has not
// been found declared failed since), and its loops run (not starting, not stopping).
type Health struct {
	mu sync.Mutex
	s  healthState
}

// healthState is what the probes read; each part is set once Run reaches it.
type healthState struct {
	db     pinger
	nc     natsStatus
	stream func(context.Context) error // looks the FIRED stream up
	member *store.Member
	loops  context.Context // the loops' context once they run
	api    bool            // the api service answers requests
}

type pinger interface {
	Ping(context.Context) error
}

type natsStatus interface {
	Status() nats.Status
}

// Probes are the node's readiness conditions: database, jetstream, cluster and loops.
func (h *Health) Probes() []health.Probe {
	return []health.Probe{
		{Name: "database", Check: h.database},
		{Name: "jetstream", Check: h.jetstream},
		{Name: "cluster", Check: h.cluster},
		{Name: "loops", Check: h.running},
	}
}

// attach tells h the node's database and NATS connection; the node's own JetStream context is
// not needed, a lookup of the FIRED stream is what says JetStream answers.
func (h *Health) attach(db pinger, nc *nats.Conn, ns string) error {
	if h == nil {
		return nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	name := events.StreamFired(ns)
	h.set(func(s *healthState) {
		s.db, s.nc = db, nc
		s.stream = func(ctx context.Context) error {
			_, err := js.Stream(ctx, name)
			if err != nil {
				return fmt.Errorf("looking up stream %s: %w", name, err)
			}
			return nil
		}
	})
	return nil
}

// joining tells h the membership the node's recoverer keeps.
func (h *Health) joining(m *store.Member) { h.set(func(s *healthState) { s.member = m }) }

// started tells h the context the node's loops run under: they run until it ends.
func (h *Health) started(ctx context.Context) { h.set(func(s *healthState) { s.loops = ctx }) }

// serving tells h the api service answers requests.
func (h *Health) serving() { h.set(func(s *healthState) { s.api = true }) }

// set changes the state under the lock; a nil Health (none asked for) does nothing.
func (h *Health) set(f func(*healthState)) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.s)
}

// get returns what the probes read.
func (h *Health) get() healthState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}

var errStarting = errors.New("the node is starting")

func (h *Health) database(ctx context.Context) error {
	s := h.get()
	if s.db == nil {
		return fmt.Errorf("not connected yet: %w", errStarting)
	}
	return s.db.Ping(ctx)
}

func (h *Health) jetstream(ctx context.Context) error {
	s := h.get()
	if s.nc == nil {
		return fmt.Errorf("not connected yet: %w", errStarting)
	}
	if st := s.nc.Status(); st != nats.CONNECTED {
		return errors.New("NATS connection " + st.String())
	}
	return s.stream(ctx)
}

func (h *Health) cluster(context.Context) error {
	s := h.get()
	switch {
	case s.member == nil:
		return fmt.Errorf("not joined yet: %w", errStarting)
	case !s.member.Joined():
		return errors.New("not a member of the cluster: joining, or declared failed (missed its check-ins) and rejoining")
	}
	return nil
}

func (h *Health) running(context.Context) error {
	s := h.get()
	switch {
	case s.loops == nil:
		return fmt.Errorf("not running yet: %w", errStarting)
	case !s.api && s.loops.Err() == nil:
		return fmt.Errorf("the api service is not answering yet: %w", errStarting)
	case s.loops.Err() != nil:
		return errors.New("stopped: the node is stopping")
	}
	return nil
}
