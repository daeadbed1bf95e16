package api

import (
	"context"
	"errors"
	"sync"

	"github.com/agatesched/agate/internal/apierr"
)

// ErrNotServing is Local's answer while its node is not serving requests: starting, or stopped.
var ErrNotServing = errors.New("the scheduler node is not serving requests yet (starting, or stopped)")

// Local calls the endpoints of a node's service in process, as a request over NATS would reach
// them: the same handlers, the same validation, the same events. The web UI's way in: it needs
// no NATS permission of its own and no round trip. Serve makes a Config's Local answer for as
// long as the service runs.
type Local struct {
	mu  sync.RWMutex
	eps map[string]Endpoint
}

// Call answers one request by endpoint name: the reply's JSON, and failed when the reply
// reports a failure. A name no endpoint serves is not_found; ErrNotServing when the node does
// not serve.
func (l *Local) Call(ctx context.Context, name string, body []byte) (reply []byte, failed *apierr.Error, err error) {
	l.mu.RLock()
	e, ok := l.eps[name]
	serving := l.eps != nil
	l.mu.RUnlock()
	if !serving {
		return nil, nil, ErrNotServing
	}
	if !ok {
		failed = apierr.NotFound("", "%q is neither a command nor a query of this scheduler", name)
		return errorBody(failed), failed, nil
	}
	r, failed := e.Handle(ctx, body)
	reply, failed = encode(r, failed, 0)
	return reply, failed, nil
}

// Kind is the kind of endpoint name, "command" or "query"; "" when there is none.
func (l *Local) Kind(name string) string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.eps[name].Kind
}

// serve makes l answer with eps until the returned function is called.
func (l *Local) serve(eps []Endpoint) (stop func()) {
	if l == nil {
		return func() {}
	}
	m := make(map[string]Endpoint, len(eps))
	for _, e := range eps {
		m[e.Name] = e
	}
	l.mu.Lock()
	l.eps = m
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		l.eps = nil
		l.mu.Unlock()
	}
}
