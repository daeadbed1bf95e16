package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/localpg"
	"github.com/agatesched/agate/internal/devenv/natsembed"
)

// infra is the PostgreSQL server and the JetStream server every workload shares.
type infra struct {
	pg       *localpg.Cluster // nil with --database-url
	baseURL  string           // a URL to any database on the server
	nats     *natsembed.Server
	pgInfo   string
	dbs      []string // databases created, dropped at the end
	keepDBs  bool
	fsyncOn  bool
	settings map[string]string
}

func startInfra(ctx context.Context, databaseURL string, log *slog.Logger) (*infra, error) {
	inf := &infra{baseURL: databaseURL}
	if databaseURL == "" {
		log.Info("starting a private PostgreSQL (fsync on)")
		pg, err := localpg.Start(ctx, localpg.Config{Fsync: true, Logger: log.With("component", "localpg")})
		if err != nil {
			return nil, fmt.Errorf("starting PostgreSQL: %w", err)
		}
		inf.pg = pg
		inf.baseURL = pg.URL("postgres")
	}
	ns, err := natsembed.Start(natsembed.Config{})
	if err != nil {
		inf.close(log)
		return nil, fmt.Errorf("starting embedded NATS: %w", err)
	}
	inf.nats = ns
	log.Info("embedded NATS JetStream ready", "url", ns.URL(), "store", ns.StoreDir())

	conn, err := pgx.Connect(ctx, inf.baseURL)
	if err != nil {
		inf.close(log)
		return nil, fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, `select version()`).Scan(&inf.pgInfo); err != nil {
		inf.close(log)
		return nil, fmt.Errorf("reading server version: %w", err)
	}
	inf.settings = map[string]string{}
	rows, err := conn.Query(ctx, `select name, setting from pg_settings
		where name in ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_connections', 'wal_sync_method')`)
	if err != nil {
		inf.close(log)
		return nil, fmt.Errorf("reading server settings: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			inf.close(log)
			return nil, fmt.Errorf("reading server settings: %w", err)
		}
		inf.settings[k] = v
	}
	rows.Close()
	inf.fsyncOn = inf.settings["fsync"] == "on" && inf.settings["synchronous_commit"] == "on"
	if !inf.fsyncOn {
		log.Warn("PostgreSQL runs without full durability; figures are not comparable with the anchors",
			"fsync", inf.settings["fsync"], "synchronous_commit", inf.settings["synchronous_commit"])
	}
	return inf, nil
}

// dbURL returns the URL of database name on the server.
func (inf *infra) dbURL(name string) (string, error) {
	u, err := url.Parse(inf.baseURL)
	if err != nil {
		return "", fmt.Errorf("parsing database URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// createDB creates a fresh database for one workload and returns its URL.
func (inf *infra) createDB(ctx context.Context, name string, settings []string) (string, error) {
	conn, err := pgx.Connect(ctx, inf.baseURL)
	if err != nil {
		return "", fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "drop database if exists "+ident+" with (force)"); err != nil {
		return "", fmt.Errorf("dropping old database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "create database "+ident); err != nil {
		return "", fmt.Errorf("creating database %s: %w", name, err)
	}
	inf.dbs = append(inf.dbs, name)
	for _, kv := range settings {
		k, v, _ := strings.Cut(kv, "=")
		// k was checked against a setting-name pattern; v is passed as a quoted literal.
		q := fmt.Sprintf("alter database %s set %s = '%s'", ident, k, strings.ReplaceAll(v, "'", "''"))
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("setting %s on database %s: %w", k, name, err)
		}
	}
	return inf.dbURL(name)
}

// close drops the workload databases (unless kept) and stops NATS and PostgreSQL.
func (inf *infra) close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if len(inf.dbs) > 0 && !inf.keepDBs && inf.pg == nil {
		// A private cluster goes away as a whole; only a shared server needs its databases dropped.
		if conn, err := pgx.Connect(ctx, inf.baseURL); err != nil {
			log.Warn("could not connect to drop the bench databases", "error", err)
		} else {
			for _, db := range inf.dbs {
				if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{db}.Sanitize()+" with (force)"); err != nil {
					log.Warn("dropping bench database failed", "database", db, "error", err)
				}
			}
			_ = conn.Close(ctx)
		}
	}
	if inf.nats != nil {
		inf.nats.Shutdown()
		log.Info("embedded NATS stopped")
	}
	if inf.pg != nil {
		if err := inf.pg.Stop(ctx); err != nil {
			log.Warn("stopping PostgreSQL failed", "error", err)
		} else {
			log.Info("private PostgreSQL stopped and its data directory removed")
		}
	}
}

// shortVersion is "PostgreSQL 15.18" out of version().
func shortVersion(v string) string {
	f := strings.Fields(v)
	if len(f) >= 2 {
		return f[0] + " " + f[1]
	}
	return v
}
