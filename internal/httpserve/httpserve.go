// Package httpserve is the HTTP listener of every Agate process (--http): /healthz, /readyz,
// /metrics and, when enabled (--pprof), Go's profiles under /debug/pprof/. The process gives it
// its readiness probes (internal/health) and takes from it the meter provider whose metrics
// /metrics serves.
package httpserve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/agatesched/agate/internal/health"
	"github.com/agatesched/agate/internal/telemetry"
)

// Timeouts of the listener.
const (
	// ReadyTimeout bounds the probes of one /readyz request: under an orchestrator's probe
	// timeout (compose's is 3 s), so that a probe that hangs reports itself instead of the
	// request timing out with no reason.
	ReadyTimeout = 2 * time.Second
	// stopTimeout bounds the wait for requests in progress when the process stops (a CPU
	// profile being taken is cut short).
	stopTimeout = 5 * time.Second
)

// Config configures a listener.
type Config struct {
	// Addr is where to listen, as --http takes it (see ListenAddr).
	Addr string
	// Pprof serves Go's profiles under /debug/pprof/.
	Pprof bool
	// Service names the process in the metrics' target_info (service.name), unless
	// OTEL_SERVICE_NAME does.
	Service string
	Logger  *slog.Logger
}

// ListenAddr is the address to listen on for addr as --http takes it: host:port as given
// (0.0.0.0:8080 or [::]:8080 for every interface, 10.0.0.5:8080 for one), and a port alone
// (:8080 or 8080) on the loopback interface, 127.0.0.1: what the listener serves is for agents
// on the same machine unless an address says otherwise. Port 0 picks a free port.
func ListenAddr(addr string) (string, error) {
	if addr == "" {
		return "", errors.New("no address")
	}
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%q is not host:port, :port or port: %w", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return net.JoinHostPort(cmp.Or(host, "127.0.0.1"), port), nil
}

// URL is the http:// URL of path on the listener at addr (as --http takes it), for a client on
// the same machine: a listener on every interface (0.0.0.0, ::) is reached on loopback.
func URL(addr, path string) (string, error) {
	a, err := ListenAddr(addr)
	if err != nil {
		return "", err
	}
	host, port, _ := net.SplitHostPort(a)
	switch host {
	case "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// Server is a running listener. A nil *Server is a process without one: its methods do nothing
// and its MeterProvider is nil (the global one, a no-op unless installed).
type Server struct {
	srv    *http.Server
	mux    *http.ServeMux
	addr   string
	prom   *telemetry.Prometheus
	log    *slog.Logger
	served chan struct{} // closed when Serve returned

	mu     sync.Mutex
	probes []health.Probe
}

// Start listens on cfg.Addr and serves until Stop. /readyz is 503 until probes are added.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	addr, err := ListenAddr(cfg.Addr)
	if err != nil {
		return nil, err
	}
	prom, err := telemetry.NewPrometheus(cfg.Service)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		_ = prom.Shutdown(ctx)
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	s := &Server{addr: l.Addr().String(), prom: prom, log: cmp.Or(cfg.Logger, slog.Default()), served: make(chan struct{})}
	s.srv = &http.Server{Handler: s.handler(cfg.Pprof), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("HTTP listener stopped", slog.String("addr", s.addr), slog.Any("error", err))
		}
	}()
	endpoints := "/healthz /readyz /metrics"
	if cfg.Pprof {
		endpoints += " /debug/pprof/"
	}
	s.log.Info("serving HTTP", slog.String("addr", s.addr), slog.String("endpoints", endpoints))
	return s, nil
}

// Addr is the address listened on (with the port chosen, when port 0 was asked for); "" for a
// nil Server.
func (s *Server) Addr() string {
	if s == nil {
		return ""
	}
	return s.addr
}

// MeterProvider is the provider whose metrics /metrics serves; nil for a nil Server.
func (s *Server) MeterProvider() metric.MeterProvider {
	if s == nil {
		return nil
	}
	return s.prom.Provider
}

// AddProbes adds readiness probes; a process that runs several parts (scheduler dev: a node
// and a worker) adds each part's.
func (s *Server) AddProbes(p ...health.Probe) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probes = append(s.probes, p...)
}

// Ready runs the probes as /readyz does.
func (s *Server) Ready(ctx context.Context) health.Report {
	s.mu.Lock()
	probes := s.probes
	s.mu.Unlock()
	return health.Check(ctx, ReadyTimeout, probes)
}

// Stop stops the listener: requests in progress get a few seconds to finish. Call it once the
// process's work has stopped, so that /readyz says "not ready" while it stops.
func (s *Server) Stop(ctx context.Context) {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.served
	if err := s.prom.Shutdown(ctx); err != nil {
		s.log.Warn("stopping the metrics failed", slog.Any("error", err))
	}
}

// Handle serves h on pattern (http.ServeMux's) besides the listener's own paths: the scheduler's
// web UI. It may be called while the listener serves.
func (s *Server) Handle(pattern string, h http.Handler) {
	if s == nil {
		return
	}
	s.mux.Handle(pattern, h)
}

func (s *Server) handler(withPprof bool) http.Handler {
	mux := http.NewServeMux()
	s.mux = mux
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The process answers: it is alive. Nothing else is checked, so that an orchestrator does
		// not restart a process that is only waiting for its database.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := s.Ready(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rep)
	})
	mux.Handle("GET /metrics", s.prom.Handler)
	if withPprof {
		// Not /debug/pprof/cmdline: the command line may hold a database URL with its password.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Get requests url and returns the body of a 2xx answer; any other status is an error carrying
// the body (a /readyz report says what is not ready). The healthcheck commands use it.
func Get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return body, fmt.Errorf("%s answered %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}
