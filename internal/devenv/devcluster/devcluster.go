// Package devcluster is the all-in-one development cluster behind `scheduler dev` and `make dev`:
// an embedded NATS JetStream server, a PostgreSQL cluster from the machine's binaries (unless a
// database URL is given), one scheduler node, one worker with the built-in job types, an example
// schedule, and a log line per lifecycle step that a developer wants to see.
package devcluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/agatesched/agate/internal/devenv/localpg"
	"github.com/agatesched/agate/internal/devenv/natsembed"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/httpserve"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/webui"
	"github.com/agatesched/agate/internal/worker"
)

// Config configures a development cluster.
type Config struct {
	// DataDir keeps PostgreSQL's data (DataDir/postgres) and JetStream's (DataDir/nats), so that a
	// second run picks up where the first left off.
	DataDir string
	// NATSPort is the embedded NATS server's port; when it is taken, a free one is used.
	NATSPort int
	// DatabaseURL names an existing PostgreSQL database; empty starts one in DataDir/postgres.
	DatabaseURL string
	// Node configures the scheduler node; the worker is named after its InstanceID.
	Node node.Config
	// Logger receives everything; default slog.Default().
	Logger *slog.Logger
	// HTTP is the address of the HTTP listener the node and the worker share (see
	// httpserve.ListenAddr); when it is taken, a free port of the same host is used. Empty: none.
	HTTP string
	// Pprof also serves Go's profiles on it.
	Pprof bool
	// UI, when set, serves the web UI on the listener. With neither a token nor ReadOnly, a
	// token is made and written to <DataDir>/ui-token, so that the UI's buttons work.
	UI *webui.Config
}

// Run starts the cluster and runs it until ctx is cancelled, then stops everything and returns
// nil. It returns an error only when something fails on its own.
func Run(ctx context.Context, cfg Config) error {
	defer takeTerminal()()
	log := cmp.Or(cfg.Logger, slog.Default())
	cfg.Node.Logger = log
	if err := cfg.Node.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	srv, err := serveHTTP(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer srv.Stop(ctx)
	cfg.Node.Health, cfg.Node.MeterProvider = &node.Health{}, srv.MeterProvider()
	srv.AddProbes(cfg.Node.Health.Probes()...)
	if cfg.UI != nil && srv != nil {
		ui := *cfg.UI
		if ui.Token == "" && !ui.ReadOnly {
			if ui.Token, err = uiToken(cfg.DataDir, log); err != nil {
				return err
			}
		}
		ui.Namespace, ui.Logger = cfg.Node.Namespace, log
		cfg.Node.API = webui.Serve(srv, ui)
	}
	dbURL := cfg.DatabaseURL
	if dbURL == "" {
		dir := filepath.Join(cfg.DataDir, "postgres")
		log.Info("starting PostgreSQL", slog.String("data", dir))
		pg, err := localpg.Start(ctx, localpg.Config{DataDir: dir, Fsync: true, Logger: log})
		if err != nil {
			return fmt.Errorf("starting PostgreSQL (run scripts/ensure-postgres.sh, or set DATABASE_URL): %w", err)
		}
		defer func() {
			if err := pg.Stop(context.WithoutCancel(ctx)); err != nil {
				log.Warn("stopping PostgreSQL failed", slog.String("error", err.Error()))
			}
		}()
		if dbURL, err = ensureDatabase(ctx, pg, "agate"); err != nil {
			return err
		}
	}
	port := cfg.NATSPort
	if !portFree(port) {
		port = -1 // natsembed picks a free one
	}
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(cfg.DataDir, "nats"), Port: port})
	if err != nil {
		return fmt.Errorf("starting embedded NATS: %w", err)
	}
	defer ns.Shutdown()
	log.Info("embedded NATS with JetStream is up", slog.String("url", ns.URL()))

	pool, err := store.Open(ctx, dbURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := nats.Connect(ns.URL(), nats.Name("agate-dev"))
	if err != nil {
		return fmt.Errorf("connecting to embedded NATS: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}
	// The tail reads the streams from their current end, so they must exist before the node
	// creates them; creating them is idempotent.
	if err := events.EnsureStreamsWith(ctx, js, cfg.Node.Namespace, cfg.Node.Streams, log); err != nil {
		return err
	}

	stopTail, err := startTail(ctx, js, cfg.Node.Namespace, log)
	if err != nil {
		return err
	}
	defer stopTail()

	reg := worker.NewRegistry()
	// A dev cluster runs on a developer's machine, where http jobs call local services (an app on
	// localhost:8080): loopback is allowed here, which cmd/worker does only with --http-allow.
	// Link-local and cloud metadata addresses stay refused.
	loopback := worker.HTTPAllowList{Prefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{HTTPAllow: loopback})
	workerID := cfg.Node.InstanceID + "-worker"
	w, err := worker.New(worker.Config{Namespace: cfg.Node.Namespace, InstanceID: workerID, Logger: log,
		MeterProvider: srv.MeterProvider()}, js, reg)
	if err != nil {
		return err
	}
	srv.AddProbes(w.Probes()...)

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return node.Run(gctx, cfg.Node, pool, nc) })
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return loadExamples(gctx, nc, cfg.Node.Namespace, log) })
	log.Info("Agate dev cluster running; Ctrl-C stops it", slog.String("nats", ns.URL()),
		slog.String("namespace", cfg.Node.Namespace))
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if err == nil {
		log.Info("Agate dev cluster stopped")
	}
	return err
}

// uiToken is the dev UI's write token, kept in <dir>/ui-token (readable by its owner only) so
// that it stays the same from one run to the next. The log says where it is, never what it is.
func uiToken(dir string, log *slog.Logger) (string, error) {
	path := filepath.Join(dir, "ui-token")
	if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
		return string(bytes.TrimSpace(b)), nil
	}
	token := rand.Text()
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing the web UI's token: %w", err)
	}
	log.Info("made a token for the web UI's buttons", slog.String("file", path))
	return token, nil
}

// serveHTTP starts the listener cfg asks for, on a free port of the same host when its port is
// taken (a developer's machine often has something on 8080); nil when none is asked for.
func serveHTTP(ctx context.Context, cfg Config, log *slog.Logger) (*httpserve.Server, error) {
	if cfg.HTTP == "" {
		return nil, nil
	}
	hc := httpserve.Config{Addr: cfg.HTTP, Pprof: cfg.Pprof, Service: "agate-dev", Logger: log}
	srv, err := httpserve.Start(ctx, hc)
	if errors.Is(err, syscall.EADDRINUSE) {
		addr, _ := httpserve.ListenAddr(cfg.HTTP) // valid: Start got as far as listening
		host, _, _ := net.SplitHostPort(addr)
		log.Warn("the HTTP address is taken; using a free port", slog.String("taken", addr))
		hc.Addr = net.JoinHostPort(host, "0")
		srv, err = httpserve.Start(ctx, hc)
	}
	if err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	return srv, nil
}

func portFree(port int) bool {
	if port <= 0 {
		return false
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// ensureDatabase creates the dev database on first run.
func ensureDatabase(ctx context.Context, pg *localpg.Cluster, name string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("connecting to local PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `select exists (select 1 from pg_database where datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("checking for database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "create database "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("creating database %s: %w", name, err)
		}
	}
	return pg.URL(name), nil
}
