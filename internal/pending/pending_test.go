package pending

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/telemetry/metrictest"
)

const gauge = "agate.consumer.pending.messages"

// clock is a settable time for the cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// startJetStream starts a NATS server with JetStream and connects to it; stop shuts the server
// down.
func startJetStream(t *testing.T) (js jetstream.JetStream, stop func()) {
	t.Helper()
	srv := testenv.StartNATS(t)
	_, js = testenv.JetStream(t, srv.URL())
	return js, srv.Shutdown
}

// setup starts JetStream with a stream S (subjects s.>) and durable consumers on it.
// The returned function stops the server.
func setup(t *testing.T, consumers ...string) (jetstream.JetStream, func()) {
	t.Helper()
	js, stop := startJetStream(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range consumers {
		if _, err := js.CreateOrUpdateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: c, FilterSubject: "s." + c}); err != nil {
			t.Fatal(err)
		}
	}
	return js, stop
}

func publish(t *testing.T, js jetstream.JetStream, subject string, n int) {
	t.Helper()
	for range n {
		if _, err := js.Publish(context.Background(), subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
}

// settled waits until JetStream reports n messages pending for consumer: the server updates a
// consumer's count after it acknowledged the publish, so a reading right away may see fewer.
func settled(t *testing.T, js jetstream.JetStream, stream, consumer string, n uint64) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		c, err := js.Consumer(context.Background(), stream, consumer)
		if err != nil {
			t.Fatal(err)
		}
		got := c.CachedInfo().NumPending
		if got == n {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("%s: JetStream reports %d pending after 10s; want %d", consumer, got, n)
		case <-tick.C:
		}
	}
}

func read(t *testing.T, r *metrictest.Reader, consumer string) (float64, bool) {
	t.Helper()
	return r.Gauge(t, gauge, metrictest.Attrs{"consumer": consumer})
}

// TestPendingByConsumer: the gauge reports NumPending of the watched consumers only (a name, a
// prefix), of a stream that does not exist nothing, and stops when unregistered.
func TestPendingByConsumer(t *testing.T) {
	js, _ := setup(t, "done", "worker-a", "worker-b", "other")
	publish(t, js, "s.done", 2)
	publish(t, js, "s.worker-a", 3)
	publish(t, js, "s.other", 4)
	settled(t, js, "S", "done", 2)
	settled(t, js, "S", "worker-a", 3)

	r := metrictest.New(t)
	unregister, err := Register(r.Provider, js, Config{Watches: []Watch{
		{Stream: "S", Name: "done"},
		{Stream: "S", Name: "worker-", Prefix: true},
		{Stream: "MISSING", Name: "x"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]float64{"done": 2, "worker-a": 3, "worker-b": 0} {
		if got, ok := read(t, r, c); !ok || got != want {
			t.Errorf("%s: pending %v (reported %v); want %v", c, got, ok, want)
		}
	}
	for _, c := range []string{"other", "x"} {
		if got, ok := read(t, r, c); ok {
			t.Errorf("%s reported (%v); it is not watched or does not exist", c, got)
		}
	}
	unregister()
	if got, ok := read(t, r, "done"); ok {
		t.Errorf("reported %v after unregister", got)
	}
}

// TestPendingCached: collections within the TTL share one reading; after it, a new reading
// shows new messages; a reading that fails reports nothing rather than the stale number.
func TestPendingCached(t *testing.T) {
	js, stopNATS := setup(t, "done")
	publish(t, js, "s.done", 1)
	settled(t, js, "S", "done", 1)
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	r := metrictest.New(t)
	unregister, err := Register(r.Provider, js, Config{Watches: []Watch{{Stream: "S", Name: "done"}},
		TTL: 5 * time.Second, Timeout: 500 * time.Millisecond, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer unregister()
	if got, _ := read(t, r, "done"); got != 1 {
		t.Fatalf("pending %v; want 1", got)
	}
	publish(t, js, "s.done", 2)
	settled(t, js, "S", "done", 3)
	clk.add(4 * time.Second)
	if got, _ := read(t, r, "done"); got != 1 {
		t.Errorf("within the TTL: pending %v; want the cached 1", got)
	}
	clk.add(time.Second)
	if got, _ := read(t, r, "done"); got != 3 {
		t.Errorf("after the TTL: pending %v; want 3", got)
	}
	stopNATS()
	clk.add(5 * time.Second)
	if got, ok := read(t, r, "done"); ok {
		t.Errorf("JetStream down: reported %v; want nothing", got)
	}
}

// Waiting sums the fires not yet delivered to the workers of every job type, and reads them
// again once its reading is WaitingTTL old.
func TestWaitingCountsFiresNotDelivered(t *testing.T) {
	js, _ := startJetStream(t)
	ctx := t.Context()
	const ns = "waiting"
	w := NewWaiting(js, ns, nil)
	at := time.Now()
	w.r.cfg.Now = func() time.Time { return at }
	if w.AtLeast(ctx, 1) {
		t.Fatal("fires wait before the FIRED stream exists")
	}
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	subjects := events.Subjects(ns)
	for _, typ := range []string{"a", "b"} {
		if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamFired(ns), jetstream.ConsumerConfig{
			Durable: events.WorkerDurable(typ), FilterSubject: subjects.Fired(typ), AckPolicy: jetstream.AckExplicitPolicy,
		}); err != nil {
			t.Fatal(err)
		}
	}
	publish(t, js, subjects.Fired("a"), 2)
	publish(t, js, subjects.Fired("b"), 1)
	settled(t, js, events.StreamFired(ns), events.WorkerDurable("a"), 2)
	settled(t, js, events.StreamFired(ns), events.WorkerDurable("b"), 1)
	at = at.Add(WaitingTTL) // the reading is as old as the TTL: read again
	if !w.AtLeast(ctx, 3) || w.AtLeast(ctx, 4) {
		t.Errorf("3 fires wait: AtLeast(3) = %v, AtLeast(4) = %v", w.AtLeast(ctx, 3), w.AtLeast(ctx, 4))
	}
	// One delivered (a worker runs it) no longer waits, once the reading is WaitingTTL old.
	c, err := js.Consumer(ctx, events.StreamFired(ns), events.WorkerDurable("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(jetstream.FetchMaxWait(time.Second)); err != nil {
		t.Fatal(err)
	}
	if !w.AtLeast(ctx, 3) {
		t.Error("the reading was not kept for WaitingTTL")
	}
	at = at.Add(WaitingTTL)
	if w.AtLeast(ctx, 3) || !w.AtLeast(ctx, 2) {
		t.Errorf("2 fires wait once one was delivered: AtLeast(3) = %v, AtLeast(2) = %v", w.AtLeast(ctx, 3), w.AtLeast(ctx, 2))
	}
}
