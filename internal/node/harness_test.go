package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/worker"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's Agate: its own database and namespace on the shared servers.
type env struct {
	t       *testing.T
	ns      string
	dbURL   string
	natsURL string
	pool    *pgxpool.Pool // for assertions
	nc      *nats.Conn
	js      jetstream.JetStream
	log     *slog.Logger
	// editedByHand: the test wrote rows itself, so replay is not checked (tablesEditedByHand).
	editedByHand bool
	// daysDropped: retention dropped days of the log, so replay starts from a snapshot only
	// (logDaysDropped).
	daysDropped bool
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, testenv.MigratedDatabase(t))
}

// newEnvOn is newEnv on the migrated database at dbURL.
func newEnvOn(t *testing.T, dbURL string) *env {
	t.Helper()
	ctx := t.Context()
	e := &env{t: t, ns: testenv.Namespace(t), dbURL: dbURL, natsURL: testenv.NATS(t),
		log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	var err error
	if e.pool, err = store.Open(ctx, dbURL, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	t.Cleanup(e.checkContract) // runs before the pool closes: cleanups run last-in first-out
	t.Cleanup(e.checkReplay)
	if e.nc, err = nats.Connect(e.natsURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.nc.Close)
	if e.js, err = jetstream.New(e.nc); err != nil {
		t.Fatal(err)
	}
	if err := events.EnsureStreams(ctx, e.js, e.ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Streams of this namespace are not needed after the test.
		for _, s := range []string{events.StreamCommands(e.ns), events.StreamFired(e.ns), events.StreamDone(e.ns), events.StreamEvents(e.ns)} {
			_ = e.js.DeleteStream(context.Background(), s)
		}
	})
	return e
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// startNode runs a scheduler node until the test ends (or stop is called).
func (e *env) startNode(id string, mod func(*node.Config)) (stop func()) {
	e.t.Helper()
	cfg := node.Config{Namespace: e.ns, InstanceID: id, Logger: e.log,
		CheckinInterval: time.Second, SweepInterval: 200 * time.Millisecond, SweepDelay: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	pool, err := store.Open(e.t.Context(), e.dbURL, 8)
	if err != nil {
		e.t.Fatal(err)
	}
	nc, err := nats.Connect(e.natsURL)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- node.Run(ctx, cfg, pool, nc) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				e.t.Errorf("node %s: %v", id, err)
			}
			nc.Close()
			pool.Close()
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// startWorker runs a worker with the built-in handlers plus extra ones. kill closes its NATS
// connection at once, as a crashed process would, and then stops it.
func (e *env) startWorker(id string, mod func(*worker.Config), extra map[string]worker.HandlerFunc) (kill func()) {
	e.t.Helper()
	nc, js := testenv.JetStream(e.t, e.natsURL)
	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{})
	for typ, h := range extra {
		reg.Register(typ, h)
	}
	cfg := worker.Config{Namespace: e.ns, InstanceID: id, Concurrency: 50, Logger: e.log.With("worker", id)}
	if mod != nil {
		mod(&cfg)
	}
	w, err := worker.New(cfg, js, reg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			nc.Close()
			cancel()
			<-done
		})
	}
	e.t.Cleanup(kill)
	return kill
}

// request sends a command on the api subject and returns the reply.
func (e *env) request(cmd string, body any) command.Outcome {
	e.t.Helper()
	data, ok := body.([]byte)
	if !ok {
		var err error
		if data, err = json.Marshal(body); err != nil {
			e.t.Fatal(err)
		}
	}
	var out command.Outcome
	deadline := time.Now().Add(15 * time.Second)
	for {
		// A ceiling, not a wait: a 10 MB body takes over 5 s to reject under the race detector.
		msg, err := e.nc.Request(events.Subjects(e.ns).API(cmd), data, 15*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond) // the node is still subscribing
			continue
		}
		if err != nil {
			e.t.Fatalf("request %s: %v", cmd, err)
		}
		if err := json.Unmarshal(msg.Data, &out); err != nil {
			e.t.Fatalf("reply to %s is not an outcome: %v: %s", cmd, err, msg.Data)
		}
		return out
	}
}

// count runs a count query against the test's database.
func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(e.t.Context(), query, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// waitFor polls cond until it holds or the timeout passes: for outcomes that come from other
// processes' work (fires, deliveries), where no in-process signal exists.
func (e *env) waitFor(timeout time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func job(group, name, typ string, data map[string]any, extra map[string]any) map[string]any {
	j := map[string]any{"group": group, "name": name, "type": typ}
	if data != nil {
		j["data"] = data
	}
	for k, v := range extra {
		j[k] = v
	}
	return j
}

func oneShot(group, name string, at time.Time) map[string]any {
	return map[string]any{"group": group, "name": name, "startAt": at.UTC().Format(time.RFC3339Nano),
		"simple": map[string]any{"repeatCount": 0}}
}

func repeating(group, name string, at time.Time, interval time.Duration, repeat int) map[string]any {
	return map[string]any{"group": group, "name": name, "startAt": at.UTC().Format(time.RFC3339Nano),
		"simple": map[string]any{"interval": interval.String(), "repeatCount": repeat}}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lockModes runs a test body in both lock modes: the Quartz-exact global lock and the
// partitioned one. The invariants must hold in each.
func lockModes(t *testing.T, body func(t *testing.T, mode func(*node.Config))) {
	for _, m := range []string{"global", "partitioned"} {
		t.Run(m, func(t *testing.T) {
			body(t, func(c *node.Config) { c.LockMode, c.Partitions = m, 4 })
		})
	}
}

// waitCount waits until a count query reaches want, and says how far it got when it does not.
func (e *env) waitCount(timeout time.Duration, what string, want int, query string, args ...any) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := e.count(query, args...)
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s: %d of %d", timeout, what, got, want)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// scheduleRepeating schedules n jobs r00…, each with a trigger firing every interval from t0,
// repeat+1 times, through the api subject.
func (e *env) scheduleRepeating(n int, t0 time.Time, interval time.Duration, repeat int) {
	e.t.Helper()
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		if out := e.request("schedule_job", map[string]any{"id": name, "job": job("g", name, "noop", nil, nil),
			"triggers": []any{repeating("g", name, t0, interval, repeat)}}); !out.OK {
			e.t.Fatalf("schedule_job: %+v", out.Error)
		}
	}
}
