package events_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/events"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func streamNames(ns string) []string {
	return []string{events.StreamCommands(ns), events.StreamFired(ns), events.StreamDone(ns), events.StreamEvents(ns)}
}

func streamConfig(t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(t.Context(), name)
	if err != nil {
		t.Fatalf("looking up %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

// syncBuffer is a log destination the tests read while the code under test may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger() (*slog.Logger, *syncBuffer) {
	var buf syncBuffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), &buf
}

func TestStreamsAreCreatedWithTheirSettings(t *testing.T) {
	_, js := testenv.JetStream(t, testenv.NATS(t))
	ns := testenv.Namespace(t)
	set := events.StreamSettings{MaxAge: time.Hour, MaxBytes: 1 << 20, DuplicateWindow: 30 * time.Second}
	if err := events.EnsureStreamsWith(t.Context(), js, ns, set, nil); err != nil {
		t.Fatal(err)
	}
	for i, family := range []string{"cmd", "fired", "done", "evt"} {
		name := streamNames(ns)[i]
		c := streamConfig(t, js, name)
		if c.Replicas != 1 || c.MaxAge != time.Hour || c.MaxBytes != 1<<20 || c.Duplicates != 30*time.Second ||
			c.Storage != jetstream.FileStorage || c.Retention != jetstream.LimitsPolicy ||
			len(c.Subjects) != 1 || c.Subjects[0] != events.Subjects(ns).All(family) {
			t.Errorf("%s: replicas %d, max age %s, max bytes %d, duplicates %s, storage %s, retention %s, subjects %v",
				name, c.Replicas, c.MaxAge, c.MaxBytes, c.Duplicates, c.Storage, c.Retention, c.Subjects)
		}
	}

	// The defaults: a week, no size cap, two minutes.
	ns = testenv.Namespace(t)
	if err := events.EnsureStreams(t.Context(), js, ns); err != nil {
		t.Fatal(err)
	}
	c := streamConfig(t, js, events.StreamFired(ns))
	if c.Replicas != 1 || c.MaxAge != 7*24*time.Hour || c.MaxBytes != -1 || c.Duplicates != 2*time.Minute {
		t.Errorf("defaults: replicas %d, max age %s, max bytes %d, duplicates %s", c.Replicas, c.MaxAge, c.MaxBytes, c.Duplicates)
	}
}

// A stream made with other settings (an earlier version's, or another node's flags) is brought
// to this node's, with its messages, and every change is logged; a second start changes nothing.
func TestExistingStreamsAreUpdated(t *testing.T) {
	ctx := t.Context()
	_, js := testenv.JetStream(t, testenv.NATS(t))
	ns := testenv.Namespace(t)
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.Subjects(ns).Evt("job"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	// Something Agate does not own, set by an operator, stays.
	fired := streamConfig(t, js, events.StreamFired(ns))
	fired.Description = "set by hand"
	if _, err := js.UpdateStream(ctx, fired); err != nil {
		t.Fatal(err)
	}

	log, out := newLogger()
	set := events.StreamSettings{MaxAge: 48 * time.Hour, MaxBytes: 2 << 20, DuplicateWindow: time.Minute}
	if err := events.EnsureStreamsWith(ctx, js, ns, set, log); err != nil {
		t.Fatal(err)
	}
	for _, name := range streamNames(ns) {
		c := streamConfig(t, js, name)
		if c.MaxAge != 48*time.Hour || c.MaxBytes != 2<<20 || c.Duplicates != time.Minute {
			t.Errorf("%s after the update: max age %s, max bytes %d, duplicates %s", name, c.MaxAge, c.MaxBytes, c.Duplicates)
		}
		for _, change := range []string{
			`setting="max age" from=168h0m0s to=48h0m0s`,
			`setting="max bytes" from=unlimited to=2097152`,
			`setting="duplicate window" from=2m0s to=1m0s`,
		} {
			line := fmt.Sprintf(`level=INFO msg="changed a setting of a JetStream stream" stream=%s %s`, name, change)
			if !strings.Contains(out.String(), line) {
				t.Errorf("the log lacks %q:\n%s", line, out)
			}
		}
	}
	if c := streamConfig(t, js, events.StreamFired(ns)); c.Description != "set by hand" {
		t.Errorf("the update dropped the stream's description: %q", c.Description)
	}
	s, err := js.Stream(ctx, events.StreamEvents(ns))
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("EVENTS holds %d messages after the update; want the 1 published before", n)
	}

	log, out = newLogger()
	if err := events.EnsureStreamsWith(ctx, js, ns, set, log); err != nil {
		t.Fatal(err)
	}
	if out.String() != "" {
		t.Errorf("a second start with the same settings logged:\n%s", out)
	}
}

// A stream of the namespace's name stored in memory cannot become a file stream: the error names
// the stream, the setting, both values and what to do, and the stream is left alone.
func TestMemoryStreamIsReported(t *testing.T) {
	ctx := t.Context()
	_, js := testenv.JetStream(t, testenv.NATS(t))
	ns := testenv.Namespace(t)
	name := events.StreamFired(ns)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{events.Subjects(ns).All("fired")},
		Storage: jetstream.MemoryStorage, MaxAge: time.Hour}); err != nil {
		t.Fatal(err)
	}
	err := events.EnsureStreams(ctx, js, ns)
	var se *events.SettingsError
	if !errors.As(err, &se) || se.Stream != name {
		t.Fatalf("got %v; want a SettingsError for %s", err, name)
	}
	for _, want := range []string{name, "storage Memory", "stored in File", "cannot change", "nats stream rm " + name} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	if c := streamConfig(t, js, name); c.Storage != jetstream.MemoryStorage || c.MaxAge != time.Hour {
		t.Errorf("the stream was changed: storage %s, max age %s", c.Storage, c.MaxAge)
	}
}

// A server without a cluster stores each stream once: asking for 3 replicas, at creation or as
// an update, is an error that says to lower --stream-replicas.
func TestReplicasBeyondTheServersAreReported(t *testing.T) {
	ctx := t.Context()
	_, js := testenv.JetStream(t, testenv.StartNATS(t).URL()) // a server of its own: NATS_URL may name a cluster
	three := events.StreamSettings{Replicas: 3}
	for _, existing := range []bool{false, true} {
		ns := testenv.Namespace(t)
		if existing {
			if err := events.EnsureStreams(ctx, js, ns); err != nil {
				t.Fatal(err)
			}
		}
		err := events.EnsureStreamsWith(ctx, js, ns, three, nil)
		var se *events.SettingsError
		if !errors.As(err, &se) || se.Stream != events.StreamCommands(ns) {
			t.Fatalf("existing %v: got %v; want a SettingsError for %s", existing, err, events.StreamCommands(ns))
		}
		wants := []string{events.StreamCommands(ns), "replicas > 1 not supported", "--stream-replicas (AGATE_STREAM_REPLICAS)"}
		if existing {
			wants = append(wants, "replicas 1 → 3")
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("existing %v: the error lacks %q: %v", existing, want, err)
			}
		}
	}
}

// Several nodes starting at once all succeed.
func TestConcurrentStartsAgree(t *testing.T) {
	_, js := testenv.JetStream(t, testenv.NATS(t))
	ns := testenv.Namespace(t)
	set := events.StreamSettings{MaxAge: 24 * time.Hour}
	errs := make(chan error, 4)
	for range cap(errs) {
		go func() { errs <- events.EnsureStreamsWith(t.Context(), js, ns, set, nil) }()
	}
	for range cap(errs) {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if c := streamConfig(t, js, events.StreamDone(ns)); c.MaxAge != 24*time.Hour {
		t.Errorf("max age %s", c.MaxAge)
	}
}

func TestStreamSettingsValidate(t *testing.T) {
	for _, c := range []struct {
		set  events.StreamSettings
		want string // "" valid
	}{
		{events.StreamSettings{}, ""},
		{events.StreamSettings{Replicas: 3, MaxAge: time.Hour, MaxBytes: 1 << 30, DuplicateWindow: time.Hour}, ""},
		{events.StreamSettings{Replicas: 6}, "replicas 6"},
		{events.StreamSettings{Replicas: -1}, "replicas -1"},
		{events.StreamSettings{MaxBytes: -1}, "negative"},
		{events.StreamSettings{MaxAge: time.Minute}, "duplicate window 2m0s must be between 100ms and the stream max age (1m0s)"},
		{events.StreamSettings{DuplicateWindow: time.Millisecond}, "duplicate window 1ms"},
	} {
		err := c.set.Validate()
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.set, err, c.want)
		}
	}
}

// On a cluster of three JetStream servers, streams made with one replica (the default, as
// compose.yaml's schedulers had before) get three when the setting asks for them.
func TestReplicasAreRaisedOnACluster(t *testing.T) {
	ctx := t.Context()
	_, js := testenv.JetStream(t, startCluster(t, 3))
	ns := testenv.Namespace(t)
	if err := events.EnsureStreams(ctx, js, ns); err != nil {
		t.Fatal(err)
	}
	// A durable made as the workers make theirs (no replica count: the stream's).
	cons, err := js.CreateOrUpdateConsumer(ctx, events.StreamFired(ns), jetstream.ConsumerConfig{
		Durable: events.WorkerDurable("noop"), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	log, out := newLogger()
	if err := events.EnsureStreamsWith(ctx, js, ns, events.StreamSettings{Replicas: 3}, log); err != nil {
		t.Fatal(err)
	}
	for _, name := range streamNames(ns) {
		if c := streamConfig(t, js, name); c.Replicas != 3 {
			t.Errorf("%s: %d replicas, want 3", name, c.Replicas)
		}
		line := fmt.Sprintf(`stream=%s setting=replicas from=1 to=3`, name)
		if !strings.Contains(out.String(), line) {
			t.Errorf("the log lacks %q:\n%s", line, out)
		}
	}
	// The server moves the durable to the stream's peers after the update, within seconds; nothing
	// signals it.
	waitFor(t, 30*time.Second, "the durable on FIRED following its stream to 3 replicas", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Cluster != nil && len(info.Cluster.Replicas) == 2 // besides the leader
	})
}

// waitFor looks at cond every 100 ms until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("no %s within %s", what, timeout)
		case <-tick.C:
		}
	}
}

// startCluster runs n JetStream servers in one cluster in this process, stopped when the test
// ends, and returns a client URL listing them all once JetStream answers.
func startCluster(t *testing.T, n int) string {
	t.Helper()
	// Each server routes to every other, so the cluster ports are chosen before any starts.
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var urls []string
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "agate-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("server n%d did not start", i+1)
		}
		urls = append(urls, s.ClientURL())
	}
	// JetStream answers once the servers have elected a meta leader.
	_, js := testenv.JetStream(t, strings.Join(urls, ","))
	// Nothing signals the election; a request made too early may go unanswered.
	waitFor(t, 30*time.Second, "answer from the cluster's JetStream", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	})
	return strings.Join(urls, ",")
}
