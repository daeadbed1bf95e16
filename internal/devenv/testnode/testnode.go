// Package testnode runs a scheduler node in the test's process on testenv's shared servers, for
// tests of what talks to a cluster from outside (the client, agatectl). It is apart from
// testenv, which the node's own packages use in their tests.
package testnode

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/worker"
)

// Node is a scheduler node of one namespace run in this process on the shared test servers, for
// tests of what talks to a cluster from outside (the client, agatectl).
type Node struct {
	Namespace string
	NATSURL   string
	NC        *nats.Conn // a connection of the test's own
	JS        jetstream.JetStream
	Pool      *pgxpool.Pool // on the node's database, for assertions
}

// Start runs a node of namespace ns on a fresh migrated database until tb ends; mod, when
// not nil, changes its configuration.
func Start(tb testing.TB, ns string, mod func(*node.Config)) *Node {
	tb.Helper()
	n := &Node{Namespace: ns, NATSURL: testenv.NATS(tb)}
	dbURL := testenv.MigratedDatabase(tb)
	var err error
	if n.NC, err = nats.Connect(n.NATSURL); err != nil {
		tb.Fatal(err)
	}
	if n.JS, err = jetstream.New(n.NC); err != nil {
		tb.Fatal(err)
	}
	if err := events.EnsureStreams(tb.Context(), n.JS, ns); err != nil {
		tb.Fatal(err)
	}
	if n.Pool, err = store.Open(tb.Context(), dbURL, 8); err != nil {
		tb.Fatal(err)
	}
	nodePool, err := store.Open(tb.Context(), dbURL, 8)
	if err != nil {
		tb.Fatal(err)
	}
	nodeNC, err := nats.Connect(n.NATSURL)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := node.Config{Namespace: ns, InstanceID: "n1", CheckinInterval: time.Second, Logger: slog.New(slog.DiscardHandler)}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg, nodePool, nodeNC) }()
	var once sync.Once
	tb.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				tb.Errorf("node: %v", err)
			}
			nodeNC.Close()
			nodePool.Close()
			n.Pool.Close()
			for _, s := range []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)} {
				_ = n.JS.DeleteStream(context.Background(), s)
			}
			n.NC.Close()
		})
	})
	return n
}

// StartWorker runs a worker of the node's namespace, with the built-in job types (noop, log,
// sleep, http), in this process until tb ends, so that fires complete.
func (n *Node) StartWorker(tb testing.TB) {
	tb.Helper()
	nc, err := nats.Connect(n.NATSURL)
	if err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
	w, err := worker.New(worker.Config{Namespace: n.Namespace, InstanceID: "w1", Logger: slog.New(slog.DiscardHandler)}, js, reg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	// Registered after the node's cleanup, so it runs first: the worker stops before the
	// node deletes the streams.
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			tb.Errorf("worker: %v", err)
		}
		nc.Close()
	})
}
