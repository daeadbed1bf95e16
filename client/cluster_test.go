package client_test

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
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster is a scheduler node of namespace ns on the shared test servers, for as long as tb
// lasts, and a NATS connection to talk to it.
type cluster struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	pool *pgxpool.Pool
	ns   string
}

func startCluster(tb testing.TB, ns string) *cluster {
	tb.Helper()
	dbURL, natsURL := testenv.MigratedDatabase(tb), testenv.NATS(tb)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := events.EnsureStreams(tb.Context(), js, ns); err != nil {
		tb.Fatal(err)
	}
	pool, err := store.Open(tb.Context(), dbURL, 8)
	if err != nil {
		tb.Fatal(err)
	}
	nodeNC, err := nats.Connect(natsURL)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Config{Namespace: ns, InstanceID: "n1", CheckinInterval: time.Second,
			Logger: slog.New(slog.DiscardHandler)}, pool, nodeNC)
	}()
	var once sync.Once
	tb.Cleanup(func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				tb.Errorf("node: %v", err)
			}
			nodeNC.Close()
			pool.Close()
			for _, s := range []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)} {
				_ = js.DeleteStream(context.Background(), s)
			}
			nc.Close()
		})
	})
	return &cluster{nc: nc, js: js, pool: pool, ns: ns}
}
