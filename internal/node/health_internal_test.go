package node

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/health"
	"github.com/agatesched/agate/internal/store"
)

type fakeDB struct{ err error }

func (f *fakeDB) Ping(context.Context) error { return f.err }

type fakeNATS struct{ status nats.Status }

func (f *fakeNATS) Status() nats.Status { return f.status }

// The node's readiness through its start, a database outage, a NATS reconnect, being declared
// failed and stopping: what each probe reports, with fakes for the database and NATS (the
// integration test in cmd/scheduler runs the real thing).
func TestHealthProbes(t *testing.T) {
	h := &Health{}
	check := func(want map[string]string) {
		t.Helper()
		r := health.Check(t.Context(), time.Second, h.Probes())
		ready := true
		for name, reason := range want {
			if got := r.Checks[name]; got != reason {
				t.Errorf("%s: %q, want %q", name, got, reason)
			}
			ready = ready && reason == health.OK
		}
		if r.Ready != ready || len(r.Checks) != len(want) {
			t.Errorf("report %+v, want ready=%v", r, ready)
		}
	}
	starting := "not connected yet: the node is starting"
	check(map[string]string{"database": starting, "jetstream": starting,
		"cluster": "not joined yet: the node is starting", "loops": "not running yet: the node is starting"})

	db, nc := &fakeDB{err: errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")}, &fakeNATS{status: nats.CONNECTED}
	streamErr := error(nil)
	h.set(func(s *healthState) {
		s.db, s.nc = db, nc
		s.stream = func(context.Context) error { return streamErr }
	})
	member := &store.Member{}
	h.joining(member)
	check(map[string]string{"database": db.err.Error(), "jetstream": health.OK,
		"cluster": "not a member of the cluster: joining, or declared failed (missed its check-ins) and rejoining",
		"loops":   "not running yet: the node is starting"})

	db.err = nil
	member.Set(7)
	loops, stop := context.WithCancel(t.Context())
	h.started(loops)
	check(map[string]string{"database": health.OK, "jetstream": health.OK, "cluster": health.OK,
		"loops": "the api service is not answering yet: the node is starting"})
	h.serving()
	check(map[string]string{"database": health.OK, "jetstream": health.OK, "cluster": health.OK, "loops": health.OK})

	nc.status = nats.RECONNECTING
	member.Set(0) // declared failed: the recoverer found its membership gone
	check(map[string]string{"database": health.OK, "jetstream": "NATS connection RECONNECTING",
		"cluster": "not a member of the cluster: joining, or declared failed (missed its check-ins) and rejoining", "loops": health.OK})

	nc.status, streamErr = nats.CONNECTED, errors.New("looking up stream AGATE_X_FIRED: nats: timeout")
	member.Set(8)
	stop()
	check(map[string]string{"database": health.OK, "jetstream": streamErr.Error(), "cluster": health.OK,
		"loops": "stopped: the node is stopping"})

	var none *Health // a node run without one
	none.joining(member)
	none.started(loops)
	none.serving()
	if err := none.attach(db, nil, "x"); err != nil {
		t.Errorf("attach on a nil Health: %v", err)
	}
}
