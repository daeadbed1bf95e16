package natsembed_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/natsembed"
	"github.com/agatesched/agate/internal/devenv/testenv"
)

func start(t *testing.T, cfg natsembed.Config) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func TestPublishToStream(t *testing.T) {
	t.Parallel()
	s := start(t, natsembed.Config{StoreDir: t.TempDir(), Logger: testLogger(t)})
	if !strings.HasPrefix(s.URL(), "nats://127.0.0.1:") {
		t.Errorf("URL() = %q, want nats://127.0.0.1:<port>", s.URL())
	}
	_, js := testenv.JetStream(t, s.URL())
	ctx := t.Context()

	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("hello")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	if string(msg.Data) != "hello" {
		t.Errorf("stored %q, want hello", msg.Data)
	}
}

func TestRestartKeepsStreamAndPort(t *testing.T) {
	t.Parallel()
	s := start(t, natsembed.Config{StoreDir: t.TempDir(), Logger: testLogger(t)})
	url := s.URL()

	reconnected := make(chan struct{}, 1)
	_, js := testenv.JetStream(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}))
	ctx := t.Context()

	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("before")); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if s.URL() != url {
		t.Errorf("URL changed from %s to %s on Restart", url, s.URL())
	}

	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("client did not reconnect within 10s of Restart")
	}
	// JetStream recovers streams asynchronously after the server accepts
	// clients, so give the stream lookup a bounded retry.
	var stream jetstream.Stream
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		stream, err = js.Stream(ctx, "T")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream T not available after restart: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := js.Publish(ctx, "t.b", []byte("after")); err != nil {
		t.Fatalf("Publish after restart: %v", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages after restart, want 2", info.State.Msgs)
	}
}

func TestInProcessConn(t *testing.T) {
	t.Parallel()
	s := start(t, natsembed.Config{})
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatalf("in-process connect: %v", err)
	}
	defer nc.Close()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestTemporaryStoreRemovedOnShutdown(t *testing.T) {
	t.Parallel()
	s, err := natsembed.Start(natsembed.Config{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	dir := s.StoreDir()
	_, js := testenv.JetStream(t, s.URL())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t"}}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	s.Shutdown()
	s.Shutdown() // idempotent
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary store %s still there after Shutdown (stat: %v)", dir, err)
	}
}

// testLogger sends log records to t.Log, visible with -v or on failure.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
