package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
)

// A node brings the namespace's existing streams (newEnv made them with the defaults) to its
// settings before it serves.
func TestNodeAppliesItsStreamSettings(t *testing.T) {
	e := newEnv(t)
	e.startNode("n1", func(c *node.Config) {
		c.Streams = events.StreamSettings{MaxAge: 48 * time.Hour, MaxBytes: 4 << 20, DuplicateWindow: time.Minute}
	})
	if out := e.request("schedule_job", map[string]any{"id": "c1", "job": job("g", "j", "noop", nil, map[string]any{"durable": true})}); !out.OK {
		t.Fatalf("schedule_job: %+v", out.Error)
	}
	for _, name := range []string{events.StreamCommands(e.ns), events.StreamFired(e.ns), events.StreamDone(e.ns), events.StreamEvents(e.ns)} {
		s, err := e.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Config; c.MaxAge != 48*time.Hour || c.MaxBytes != 4<<20 || c.Duplicates != time.Minute {
			t.Errorf("%s: max age %s, max bytes %d, duplicates %s", name, c.MaxAge, c.MaxBytes, c.Duplicates)
		}
	}
}

// Settings JetStream refuses stop the node with the error, instead of a start retried forever.
func TestNodeStopsOnRefusedStreamSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pool, err := store.Open(ctx, testenv.MigratedDatabase(t), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	nc, err := nats.Connect(testenv.StartNATS(t).URL()) // one server, no cluster
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	err = node.Run(ctx, node.Config{Namespace: testenv.Namespace(t), InstanceID: "n1",
		Streams: events.StreamSettings{Replicas: 3}}, pool, nc)
	var se *events.SettingsError
	if !errors.As(err, &se) || ctx.Err() != nil || !strings.Contains(err.Error(), "--stream-replicas") {
		t.Fatalf("node.Run returned %v (context: %v); want the refused replicas, at once", err, ctx.Err())
	}
}
