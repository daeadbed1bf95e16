// Package natsembed runs a NATS server with JetStream inside this process,
// for tests and for the all-in-one `scheduler dev` mode.
//
// The server listens on TCP like any other, so clients connect with
// [Server.URL]; [Server.InProcessConn] also lets nats.go connect without a
// socket (nats.InProcessServer). [Server.Restart] stops it and starts it
// again on the same port and store directory, which failure tests use to
// check that clients and streams survive a broker restart.
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Config says where and how to run the embedded server.
type Config struct {
	// StoreDir holds JetStream's data. When empty, a temporary directory is
	// used and removed by [Server.Shutdown].
	StoreDir string

	// Host is the address to listen on; empty means 127.0.0.1.
	Host string

	// Port is the client port; -1 or 0 picks a random free port, which then
	// stays the same across [Server.Restart].
	Port int

	// Logger receives the server's log lines at debug level (warnings and
	// errors at their own level). nil discards them.
	Logger *slog.Logger
}

// JetStream limits, sized for a developer machine: enough for tests and a
// local demo, small enough not to surprise anyone.
const (
	maxMemory = 256 << 20 // bytes of memory-backed streams
	maxStore  = 1 << 30   // bytes of file-backed streams
)

// maxPayload is the largest message the embedded server accepts.
const maxPayload = 16 << 20

// readyTimeout bounds how long Start waits for the server to accept clients.
const readyTimeout = 10 * time.Second

// Server is an embedded NATS server with JetStream. Its methods are safe for
// concurrent use.
type Server struct {
	logger  *slog.Logger
	tempDir string // removed by Shutdown; "" when StoreDir was given

	mu   sync.Mutex
	opts server.Options
	ns   *server.Server
}

// Start starts a server and returns once it accepts client connections.
func Start(cfg Config) (*Server, error) {
	s := &Server{logger: cfg.Logger}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}

	storeDir := cfg.StoreDir
	if storeDir == "" {
		dir, err := os.MkdirTemp("", "agate-nats-")
		if err != nil {
			return nil, fmt.Errorf("create temporary JetStream store directory: %w", err)
		}
		s.tempDir, storeDir = dir, dir
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}

	s.opts = server.Options{
		ServerName:         "agate-embedded",
		Host:               host,
		Port:               port,
		JetStream:          true,
		JetStreamMaxMemory: maxMemory,
		JetStreamMaxStore:  maxStore,
		StoreDir:           storeDir,
		// Signals belong to the embedding program.
		NoSigs: true,
		NoLog:  cfg.Logger == nil,
		// Above NATS's 1 MiB default so that an oversized command reaches the scheduler and is
		// rejected with a reason, instead of failing in the producer's client.
		MaxPayload: maxPayload,
	}
	if err := s.startLocked(); err != nil {
		s.removeTemp()
		return nil, err
	}
	// Pin the port so Restart comes back where clients expect it.
	s.opts.Port = s.port()
	s.logger.Info("natsembed: NATS server with JetStream ready", "url", s.URL(), "store", storeDir)
	return s, nil
}

func (s *Server) startLocked() error {
	opts := s.opts // NewServer keeps and mutates its options
	ns, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("configure embedded NATS server: %w", err)
	}
	if !opts.NoLog {
		ns.SetLogger(slogAdapter{s.logger}, s.logger.Enabled(context.Background(), slog.LevelDebug), false)
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embedded NATS server on %s did not accept connections within %s "+
			"(is the port taken? is the store directory %s writable?)",
			net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)), readyTimeout, opts.StoreDir)
	}
	if !ns.JetStreamEnabled() {
		ns.Shutdown()
		ns.WaitForShutdown()
		return errors.New("embedded NATS server started without JetStream; check the store directory " + opts.StoreDir)
	}
	s.ns = ns
	return nil
}

func (s *Server) port() int {
	if addr, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return addr.Port
	}
	return s.opts.Port
}

// URL returns the client URL, e.g. nats://127.0.0.1:4222.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return "nats://" + net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// InProcessConn returns a connection to the server that bypasses TCP; it
// makes *Server a nats.InProcessConnProvider for nats.InProcessServer.
func (s *Server) InProcessConn() (net.Conn, error) {
	s.mu.Lock()
	ns := s.ns
	s.mu.Unlock()
	if ns == nil {
		return nil, errors.New("embedded NATS server is shut down")
	}
	return ns.InProcessConn()
}

// Shutdown stops the server, waits until it is down, and removes the store
// directory if it was temporary. Calling it again does nothing.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdownLocked()
	s.removeTemp()
}

// Restart shuts the server down and starts it again on the same port and
// store directory; JetStream streams and consumers survive. Connected
// clients see a disconnect and reconnect on their own.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdownLocked()
	if err := s.startLocked(); err != nil {
		return fmt.Errorf("restart embedded NATS server: %w", err)
	}
	s.logger.Info("natsembed: NATS server restarted", "port", s.opts.Port)
	return nil
}

func (s *Server) shutdownLocked() {
	if s.ns == nil {
		return
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.ns = nil
}

func (s *Server) removeTemp() {
	if s.tempDir == "" {
		return
	}
	if err := os.RemoveAll(s.tempDir); err != nil {
		s.logger.Warn("natsembed: could not remove temporary store directory", "dir", s.tempDir, "err", err)
		return
	}
	s.tempDir = ""
}

// slogAdapter routes nats-server's printf-style logger to slog. Its notices
// are routine (listening, JetStream stats) and go to debug.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.log(slog.LevelDebug, format, v) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.log(slog.LevelWarn, format, v) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.log(slog.LevelError, format, v) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }
func (a slogAdapter) Tracef(format string, v ...any)  { a.log(slog.LevelDebug, format, v) }

func (a slogAdapter) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	if a.l.Enabled(ctx, level) {
		a.l.Log(ctx, level, "nats-server: "+fmt.Sprintf(format, v...))
	}
}
