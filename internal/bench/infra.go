package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/chaos"
	"github.com/agatesched/agate/internal/devenv/localpg"
)

// infra is what every workload shares, as a user would run it: the PostgreSQL server, the built
// scheduler, worker and nats-server binaries, one nats-server process, and the directory of the
// processes' logs.
type infra struct {
	pg       *localpg.Cluster // nil with --database-url
	baseURL  string           // a URL to any database on the server
	pgInfo   string
	dbs      []string // databases created, dropped at the end
	keepDBs  bool
	fsyncOn  bool
	settings map[string]string
	// statements: pg_stat_statements is loaded on the server (the private one preloads it).
	statements bool
	// pgDataDir is the server's data directory as it reports it ("" when the bench's role may
	// not read it). Its postmaster's CPU is reported when the directory is on this machine and
	// its postmaster.pid names this server (postgresPIDs).
	pgDataDir string
	pgStarted int64 // the server's start, Unix seconds (pg_postmaster_start_time)

	dir     string // logs, binaries, JetStream store
	bin     string
	natsURL string
	nats    *proc
	// natsPprof is nats-server's profiling listener (its --profile port), with --profile.
	natsPprof *pprofTarget
}

func startInfra(ctx context.Context, databaseURL string, profile bool, log *slog.Logger) (*infra, error) {
	inf := &infra{baseURL: databaseURL}
	dir, err := os.MkdirTemp("", "agatebench-")
	if err != nil {
		return nil, fmt.Errorf("creating the bench's temporary directory: %w", err)
	}
	inf.dir, inf.bin = dir, filepath.Join(dir, "bin")
	if databaseURL == "" {
		log.Info("starting a private PostgreSQL (fsync on, pg_stat_statements preloaded)")
		pg, err := localpg.Start(ctx, localpg.Config{Fsync: true, Preload: []string{"pg_stat_statements"},
			Logger: log.With("component", "localpg")})
		if err != nil {
			return nil, fmt.Errorf("starting PostgreSQL: %w", err)
		}
		inf.pg = pg
		inf.baseURL = pg.URL("postgres")
	}
	if err := chaos.BuildBinaries(ctx, inf.bin, log); err != nil {
		inf.close(log)
		return nil, fmt.Errorf("building the scheduler, worker and nats-server binaries: %w", err)
	}
	if err := inf.startNATS(ctx, profile); err != nil {
		inf.close(log)
		return nil, err
	}
	log.Info("nats-server running", "url", inf.natsURL, "logs", dir)
	if err := inf.readServer(ctx, log); err != nil {
		inf.close(log)
		return nil, err
	}
	return inf, nil
}

// startNATS starts nats-server with JetStream (file store in the bench's directory) on a free port;
// with profile, its profiling listener too.
func (inf *infra) startNATS(ctx context.Context, profile bool) error {
	port, err := chaos.FreePort()
	if err != nil {
		return fmt.Errorf("finding a port for nats-server: %w", err)
	}
	inf.natsURL = fmt.Sprintf("nats://127.0.0.1:%d", port)
	args := []string{"-js", "-sd", filepath.Join(inf.dir, "jetstream"), "-a", "127.0.0.1", "-p", strconv.Itoa(port)}
	if profile {
		pport, err := chaos.FreePort()
		if err != nil {
			return fmt.Errorf("finding a port for nats-server's profiles: %w", err)
		}
		// nats-server serves Go's /debug/pprof on its --profile port.
		inf.natsPprof = &pprofTarget{name: "nats-server", addr: fmt.Sprintf("127.0.0.1:%d", pport)}
		args = append(args, "--profile", strconv.Itoa(pport))
	}
	logPath := filepath.Join(inf.dir, "nats-server.log")
	inf.nats, err = startProc(filepath.Join(inf.bin, "nats-server"), logPath, nil, args...)
	if err != nil {
		return err
	}
	if err := chaos.WaitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", port), 20*time.Second); err != nil {
		return fmt.Errorf("nats-server: %w (log %s)", err, logPath)
	}
	return nil
}

func (inf *infra) readServer(ctx context.Context, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, inf.baseURL)
	if err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.QueryRow(ctx, `select version(), floor(extract(epoch from pg_postmaster_start_time()))::bigint`).
		Scan(&inf.pgInfo, &inf.pgStarted); err != nil {
		return fmt.Errorf("reading server version: %w", err)
	}
	inf.settings = map[string]string{}
	rows, err := conn.Query(ctx, `select name, setting from pg_settings
		where name in ('fsync', 'synchronous_commit', 'full_page_writes', 'shared_buffers', 'max_connections',
		'wal_sync_method', 'shared_preload_libraries', 'data_directory', 'port')`)
	if err != nil {
		return fmt.Errorf("reading server settings: %w", err)
	}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return fmt.Errorf("reading server settings: %w", err)
		}
		inf.settings[k] = v
	}
	rows.Close()
	inf.fsyncOn = inf.settings["fsync"] == "on" && inf.settings["synchronous_commit"] == "on"
	if !inf.fsyncOn {
		log.Warn("PostgreSQL runs without full durability; figures are not those of a production setup",
			"fsync", inf.settings["fsync"], "synchronous_commit", inf.settings["synchronous_commit"])
	}
	inf.pgDataDir = inf.settings["data_directory"] // readable by a superuser (or pg_read_all_settings)
	delete(inf.settings, "data_directory")
	if inf.pg == nil && inf.postgresPIDs() == nil {
		log.Info("PostgreSQL's CPU is not reported: the server given is not on this machine, or its data directory cannot be read",
			"data_directory", inf.pgDataDir)
	}
	inf.statements = strings.Contains(inf.settings["shared_preload_libraries"], "pg_stat_statements")
	if !inf.statements {
		log.Warn("pg_stat_statements is not in the server's shared_preload_libraries: the report has no top statements")
	}
	return nil
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

// flushWrites runs before a measurement, so that it does not pay for writing what was written
// before it: CHECKPOINT flushes PostgreSQL's dirty buffers (a checkpoint that started during an
// intake measurement cost it about 10 %), then sync(2) the page cache's dirty pages. Without the
// sync the kernel wrote back what the set-up had written (the built binaries, the workload's
// scheduling: 150–300 MB) 30 s later (vm.dirty_expire_centisecs) in one go, in the middle of the
// steady run, and its commits waited for the disk (fire lateness p99 of that second 57–91 ms
// against 15–25). A server where the bench's role may not checkpoint (PostgreSQL 15: superuser
// or pg_checkpoint) is measured without, with a warning.
func (inf *infra) flushWrites(ctx context.Context, log *slog.Logger) {
	conn, err := pgx.Connect(ctx, inf.baseURL)
	if err == nil {
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, "checkpoint")
	}
	if err != nil {
		log.Warn("no CHECKPOINT before the measurement: figures may include flushing the previous one's writes", "error", err)
	}
	syscall.Sync()
}

// createDB creates a fresh database for one workload (with pg_stat_statements when the server
// loads it) and returns its URL.
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
	u, err := inf.dbURL(name)
	if err != nil {
		return "", err
	}
	if inf.statements {
		db, err := pgx.Connect(ctx, u)
		if err != nil {
			return "", fmt.Errorf("connecting to %s: %w", name, err)
		}
		defer db.Close(context.WithoutCancel(ctx))
		if _, err := db.Exec(ctx, "create extension if not exists pg_stat_statements"); err != nil {
			return "", fmt.Errorf("creating extension pg_stat_statements in %s (Debian: package postgresql-contrib or postgresql-15): %w", name, err)
		}
	}
	return u, nil
}

// dropDB drops a workload's database once the workload has ended (unless --keep-databases), so
// that autovacuum cleaning its dead rows does not take the cores from the workloads after it.
func (inf *infra) dropDB(ctx context.Context, name string, log *slog.Logger) {
	if inf.keepDBs {
		return
	}
	conn, err := pgx.Connect(ctx, inf.baseURL)
	if err != nil {
		log.Warn("could not connect to drop a bench database", "database", name, "error", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{name}.Sanitize()+" with (force)"); err != nil {
		log.Warn("dropping bench database failed", "database", name, "error", err)
		return
	}
	inf.dbs = slices.DeleteFunc(inf.dbs, func(db string) bool { return db == name })
}

// close stops nats-server, drops the workload databases (unless kept) and stops PostgreSQL.
func (inf *infra) close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if inf.nats != nil {
		inf.nats.stop()
	}
	if inf.pg == nil {
		// A private cluster goes away as a whole; only a shared server needs its databases dropped.
		for _, db := range slices.Clone(inf.dbs) {
			inf.dropDB(ctx, db, log)
		}
	}
	if inf.pg != nil {
		if err := inf.pg.Stop(ctx); err != nil {
			log.Warn("stopping PostgreSQL failed", "error", err)
		} else {
			log.Info("private PostgreSQL stopped and its data directory removed")
		}
	}
	if inf.dir != "" {
		_ = os.RemoveAll(filepath.Join(inf.dir, "jetstream"))
		_ = os.RemoveAll(inf.bin)
		log.Info("process logs kept", "dir", inf.dir)
	}
}

// proc is one process the bench started, in its own process group.
type proc struct {
	name string // n1, w2, nats-server
	cmd  *exec.Cmd
	done chan struct{} // closed once it exited and was reaped
}

// startProc starts a process in its own process group, killed if the bench dies, its output
// appended to logPath.
func startProc(bin, logPath string, extraEnv []string, args ...string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", logPath, err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", filepath.Base(bin), err)
	}
	return &proc{name: filepath.Base(bin), cmd: cmd, done: make(chan struct{})}, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL without reaping: the zombie keeps its CPU times readable in /proc until
// stop, and its CPU is not added to the bench's own (reaped children's) time meanwhile.
func (p *proc) kill() error { return p.cmd.Process.Signal(syscall.SIGKILL) }

// stop sends SIGTERM, and SIGKILL to the group after 20 s, and waits for the process to exit.
func (p *proc) stop() {
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
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
