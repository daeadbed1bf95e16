package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/health"
)

// pulling says whether the worker's pull loops run: the context they run under once started.
type pulling struct {
	mu  sync.Mutex
	ctx context.Context
}

func (p *pulling) set(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ctx = ctx
}

func (p *pulling) check(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.ctx == nil:
		return errors.New("not pulling yet: waiting for a scheduler to create the namespace's streams, or creating the consumers")
	case p.ctx.Err() != nil:
		return errors.New("stopped pulling: the worker is stopping")
	}
	return nil
}

// Probes are the worker's readiness conditions (internal/health): connected to NATS ("nats"),
// and pulling jobs from its consumers ("consumers").
func (w *Worker) Probes() []health.Probe {
	return []health.Probe{
		{Name: "nats", Check: func(context.Context) error { return connected(w.js.Conn()) }},
		{Name: "consumers", Check: w.pulling.check},
	}
}

// connected is nil when nc is connected, else says what it is doing.
func connected(nc *nats.Conn) error {
	if s := nc.Status(); s != nats.CONNECTED {
		return errors.New("NATS connection " + s.String())
	}
	return nil
}
