// Package localpg runs a PostgreSQL cluster from the machine's own
// PostgreSQL binaries (initdb + pg_ctl), for tests and for the all-in-one
// `scheduler dev` mode.
//
// [Start] initialises a data directory when needed, writes the settings it
// owns to agate.conf (included from postgresql.conf), starts the server on
// 127.0.0.1 and waits until it accepts connections. A persistent data
// directory can be started again later and picks up where it left off,
// including after the server was killed with -9.
//
// initdb and postgres refuse to run as root. When this process is root (as
// CI is), they run as the `postgres` OS user created by Debian's package,
// and the data directory is given to that user.
//
// The cluster trusts every local connection as user postgres: it is meant
// for development and tests, never for production data.
package localpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config says where and how to run a cluster. The zero value is a throwaway
// cluster in a temporary directory on a free port, with fsync off.
type Config struct {
	// DataDir is the cluster's data directory. When set, it persists: it is
	// initialised on first use and reused afterwards. When empty, a temporary
	// directory is used and removed by [Cluster.Stop].
	DataDir string

	// Port is the TCP port on 127.0.0.1. 0 reuses the port recorded in an
	// existing data directory if it is free, and otherwise picks a free one.
	Port int

	// Fsync keeps PostgreSQL's durability settings on. Tests leave it false:
	// fsync, synchronous_commit and full_page_writes off make them much
	// faster, at the price of losing data if the machine crashes.
	Fsync bool

	// Preload names server libraries loaded at start (shared_preload_libraries), e.g.
	// pg_stat_statements for a benchmark that reads it. Empty: none, PostgreSQL's default.
	Preload []string

	// Logger receives progress messages. nil discards them.
	Logger *slog.Logger
}

// Cluster is a running (or stopped) PostgreSQL cluster started by [Start].
// Its methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	owner   *runAs // nil: programs run as this process
	dataDir string
	tempDir string // removed by Stop; "" when DataDir was given
	fsync   bool
	preload []string
	logger  *slog.Logger

	mu   sync.Mutex
	port int
}

const (
	// confFile holds the settings Start owns; rewritten on every start.
	confFile = "agate.conf"
	// logFile receives the server's output (pg_ctl -l).
	logFile = "postgres.log"
	// startTimeout bounds pg_ctl start -w; recovery after a crash can take
	// a while on a slow disk.
	startTimeout = 120 * time.Second
)

// Start initialises the data directory if needed and starts PostgreSQL,
// returning once the server accepts connections. The caller must call
// [Cluster.Stop] to stop it (and to remove a temporary data directory).
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	binDir, err := FindBinDir(ctx)
	if err != nil {
		return nil, err
	}
	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	c := &Cluster{binDir: binDir, owner: owner, fsync: cfg.Fsync, preload: cfg.Preload, logger: logger}

	if cfg.DataDir == "" {
		// Our own temporary parent, which we can make reachable for the
		// server user (t.TempDir() is 0700 and root's in CI).
		c.tempDir, err = os.MkdirTemp("", "agate-pg-")
		if err != nil {
			return nil, fmt.Errorf("create temporary directory for PostgreSQL: %w", err)
		}
		if err := os.Chmod(c.tempDir, 0o755); err != nil {
			c.removeTemp()
			return nil, fmt.Errorf("create temporary directory for PostgreSQL: %w", err)
		}
		c.dataDir = filepath.Join(c.tempDir, "data")
	} else {
		c.dataDir, err = filepath.Abs(cfg.DataDir)
		if err != nil {
			return nil, fmt.Errorf("resolve data directory %q: %w", cfg.DataDir, err)
		}
	}

	if err := c.prepare(ctx); err != nil {
		c.removeTemp()
		return nil, err
	}
	port, fixed, err := c.choosePort(cfg.Port)
	if err != nil {
		c.removeTemp()
		return nil, err
	}
	if err := c.start(ctx, port, fixed); err != nil {
		c.removeTemp()
		return nil, err
	}
	return c, nil
}

// URL returns a connection string for database dbname as the superuser
// postgres, e.g. postgres://postgres@127.0.0.1:5432/dbname?sslmode=disable.
func (c *Cluster) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// DataDir returns the absolute path of the data directory. Its postgres.log
// holds the server's output.
func (c *Cluster) DataDir() string { return c.dataDir }

// Stop stops the server (pg_ctl stop -m fast: open sessions are
// disconnected) and removes the data directory if it was temporary. Stopping
// a stopped cluster is not an error.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.stop(ctx)
	if err == nil {
		c.removeTemp()
	}
	return err
}

// Restart stops the server and starts it again on the same port and data
// directory, as a failure test needs. It also brings back a server that was
// stopped with [Cluster.Kill].
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stop(ctx); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err != nil {
		return fmt.Errorf("restart PostgreSQL: data directory %s is gone (Stop removes a temporary one; "+
			"call Start for a new cluster): %w", c.dataDir, err)
	}
	return c.startLocked(ctx, c.port, true)
}

// RestartImmediate is `pg_ctl restart -m immediate` with a pause: the server stops at once (no
// checkpoint, sessions cut, as a crash would leave it, but by its own postmaster), stays down for
// down, and starts again on the same port, running crash recovery. A stopped server is just
// started.
func (c *Cluster) RestartImmediate(ctx context.Context, down time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pf, ok, err := readPIDFile(c.dataDir); err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	} else if ok && processAlive(pf.pid) {
		c.logger.InfoContext(ctx, "localpg: stopping PostgreSQL immediately", "dir", c.dataDir)
		out, err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "immediate", "-D", c.dataDir)
		if err != nil {
			return fmt.Errorf("stop PostgreSQL immediately in %s: %w\n%s", c.dataDir, err, out)
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	return c.startLocked(ctx, c.port, true)
}

// Kill stops the server the hard way: SIGKILL to the postmaster and all its
// processes, as a crash would. It returns once they are gone. [Cluster.Restart]
// brings the server back, running crash recovery.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	pf, ok, err := readPIDFile(c.dataDir)
	if err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	if !ok || !processAlive(pf.pid) {
		return nil
	}
	pids := append([]int{pf.pid}, childrenOf(pf.pid)...)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL) // already gone is fine
	}
	return waitGone(context.Background(), pids, 10*time.Second)
}

// prepare creates and, if needed, initialises the data directory.
func (c *Cluster) prepare(ctx context.Context) error {
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := c.checkReachable(c.dataDir); err != nil {
		return err
	}
	if c.owner != nil {
		fi, err := os.Stat(c.dataDir)
		if err != nil {
			return err
		}
		// Only walk the tree when it is not the server user's yet; a big
		// existing cluster is already right.
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != c.owner.uid {
			if err := c.chownTree(c.dataDir); err != nil {
				return err
			}
		}
	}

	major, err := serverMajor(ctx, c.binDir)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(c.dataDir, "PG_VERSION"))
	switch {
	case err == nil:
		if have := strings.TrimSpace(string(b)); have != major {
			return fmt.Errorf("data directory %s belongs to PostgreSQL %s but the installed server (%s) is %s; "+
				"remove the directory to start afresh, or install PostgreSQL %s", c.dataDir, have, c.binDir, major, have)
		}
		c.logger.InfoContext(ctx, "localpg: reusing data directory", "dir", c.dataDir)
	case errors.Is(err, fs.ErrNotExist):
		if err := c.initdb(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("read data directory: %w", err)
	}

	// Our settings live in their own file so that re-running Start can
	// rewrite them without touching the user's postgresql.conf edits.
	conf := filepath.Join(c.dataDir, "postgresql.conf")
	b, err = os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("read %s: %w", conf, err)
	}
	const include = "include_if_exists = '" + confFile + "'"
	if !strings.Contains(string(b), include) {
		f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("add agate settings to %s: %w", conf, err)
		}
		_, err = io.WriteString(f, "\n# Settings written by agate's localpg on every start.\n"+include+"\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("add agate settings to %s: %w", conf, err)
		}
	}
	return nil
}

func (c *Cluster) initdb(ctx context.Context) error {
	c.logger.InfoContext(ctx, "localpg: initialising data directory", "dir", c.dataDir, "bin", c.binDir)
	args := []string{"-D", c.dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8"}
	if !c.fsync {
		args = append(args, "--no-sync")
	}
	// C.UTF-8 sorts bytewise but knows Unicode character classes; machines
	// without it still have plain C.
	out, err := c.run(ctx, "initdb", append(args, "--locale=C.UTF-8")...)
	if err != nil && strings.Contains(out, "locale") {
		_ = os.RemoveAll(c.dataDir)
		if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
			return fmt.Errorf("create data directory: %w", err)
		}
		if err := c.chownTree(c.dataDir); err != nil {
			return err
		}
		out, err = c.run(ctx, "initdb", append(args, "--locale=C")...)
	}
	if err != nil {
		return fmt.Errorf("initdb %s failed: %w\n%s", c.dataDir, err, out)
	}
	return nil
}

var portLineRE = regexp.MustCompile(`(?m)^\s*port\s*=\s*(\d+)`)

// choosePort returns the port to start on, and whether it is fixed (a port
// we picked ourselves may be taken by someone else before postgres binds it,
// in which case start picks another).
func (c *Cluster) choosePort(configured int) (port int, fixed bool, err error) {
	if configured != 0 {
		return configured, true, nil
	}
	if b, err := os.ReadFile(filepath.Join(c.dataDir, confFile)); err == nil {
		if m := portLineRE.FindSubmatch(b); m != nil {
			if p, _ := strconv.Atoi(string(m[1])); p > 0 && portFree(p) {
				return p, false, nil
			}
		}
	}
	p, err := freePort()
	return p, false, err
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free TCP port on 127.0.0.1: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func (c *Cluster) start(ctx context.Context, port int, fixed bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startLocked(ctx, port, fixed)
}

// startLocked writes agate.conf for port and runs pg_ctl start. When the
// port is not fixed and turns out to be taken, it tries other free ports.
func (c *Cluster) startLocked(ctx context.Context, port int, fixed bool) error {
	if err := c.clearStalePID(ctx); err != nil {
		return err
	}
	const attempts = 3
	for i := 1; ; i++ {
		err := c.startOnce(ctx, port)
		if err == nil {
			return nil
		}
		if fixed || i == attempts || !errors.Is(err, errPortInUse) {
			return err
		}
		c.logger.InfoContext(ctx, "localpg: port taken, trying another", "port", port)
		if port, err = freePort(); err != nil {
			return err
		}
	}
}

var errPortInUse = errors.New("port already in use")

func (c *Cluster) startOnce(ctx context.Context, port int) error {
	if err := c.writeConf(port); err != nil {
		return err
	}
	logPath := filepath.Join(c.dataDir, logFile)
	logStart := fileSize(logPath)

	c.logger.InfoContext(ctx, "localpg: starting PostgreSQL", "dir", c.dataDir, "port", port)
	out, err := c.run(ctx, "pg_ctl", "start", "-w",
		"-t", strconv.Itoa(int(startTimeout/time.Second)),
		"-D", c.dataDir, "-l", logPath)
	if err != nil {
		tail := logTail(logPath, logStart)
		err = fmt.Errorf("start PostgreSQL in %s on port %d: %w\n%s\n--- %s ---\n%s",
			c.dataDir, port, err, out, logPath, tail)
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return err
	}
	c.port = port
	if err := c.waitAccepting(ctx, logPath, logStart); err != nil {
		return err
	}
	c.logger.InfoContext(ctx, "localpg: PostgreSQL ready", "url", c.urlLocked("postgres"))
	return nil
}

func (c *Cluster) urlLocked(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

// waitAccepting connects until the server answers. pg_ctl -w already waited
// for the postmaster to report ready; this proves TCP on 127.0.0.1 works.
func (c *Cluster) waitAccepting(ctx context.Context, logPath string, logStart int64) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var lastErr error
	for {
		conn, err := pgx.Connect(ctx, c.urlLocked("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("PostgreSQL started but does not accept connections on 127.0.0.1:%d: %w\n--- %s ---\n%s",
				c.port, lastErr, logPath, logTail(logPath, logStart))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Cluster) writeConf(port int) error {
	// Unix sockets go in the data directory, which the server user owns
	// (Debian's default /var/run/postgresql may not exist or be writable);
	// socket paths are limited to ~107 bytes, so long paths go without.
	socketDir := c.dataDir
	if len(socketDir)+len("/.s.PGSQL.65535.lock") > 100 || strings.ContainsAny(socketDir, "',") {
		socketDir = ""
	}
	onOff := "off"
	if c.fsync {
		onOff = "on"
	}
	conf := fmt.Sprintf(`# Written by agate's localpg on every start; edits here are overwritten.
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_connections = 200
fsync = %s
synchronous_commit = %s
full_page_writes = %s
`, port, socketDir, onOff, onOff, onOff)
	if len(c.preload) > 0 {
		conf += fmt.Sprintf("shared_preload_libraries = '%s'\n", strings.Join(c.preload, ","))
	}
	if err := c.writeOwnedFile(filepath.Join(c.dataDir, confFile), []byte(conf)); err != nil {
		return fmt.Errorf("write PostgreSQL settings: %w", err)
	}
	return nil
}

// clearStalePID deals with a postmaster.pid left behind. If its server is
// still running (we crashed, it did not), stop it so it restarts with our
// settings. If its process is dead or the PID now belongs to something else,
// remove the file: postgres would otherwise refuse to start when the PID has
// been recycled.
func (c *Cluster) clearStalePID(ctx context.Context) error {
	pf, ok, err := readPIDFile(c.dataDir)
	if err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	if !ok {
		return nil
	}
	if processAlive(pf.pid) && isPostgres(pf.pid) {
		c.logger.InfoContext(ctx, "localpg: stopping PostgreSQL left running from an earlier start",
			"pid", pf.pid, "port", pf.port)
		out, err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", c.dataDir)
		if err != nil {
			return fmt.Errorf("stop PostgreSQL left running in %s (pid %d): %w\n%s", c.dataDir, pf.pid, err, out)
		}
		return nil
	}
	c.logger.InfoContext(ctx, "localpg: removing stale postmaster.pid", "pid", pf.pid)
	// The socket lock file names the dead PID too and gets the same check.
	stale, _ := filepath.Glob(filepath.Join(c.dataDir, ".s.PGSQL.*"))
	for _, p := range append(stale, filepath.Join(c.dataDir, "postmaster.pid")) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", p, err)
		}
	}
	return nil
}

func (c *Cluster) stop(ctx context.Context) error {
	pf, ok, err := readPIDFile(c.dataDir)
	if err != nil {
		return fmt.Errorf("read postmaster.pid: %w", err)
	}
	if !ok || !processAlive(pf.pid) {
		return nil
	}
	c.logger.InfoContext(ctx, "localpg: stopping PostgreSQL", "dir", c.dataDir)
	out, err := c.run(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", c.dataDir)
	if err != nil {
		return fmt.Errorf("stop PostgreSQL in %s: %w\n%s\n--- %s ---\n%s", c.dataDir, err, out,
			filepath.Join(c.dataDir, logFile), logTail(filepath.Join(c.dataDir, logFile), 0))
	}
	return nil
}

func (c *Cluster) removeTemp() {
	if c.tempDir == "" {
		return
	}
	if err := os.RemoveAll(c.tempDir); err != nil {
		c.logger.Warn("localpg: could not remove temporary data directory", "dir", c.tempDir, "err", err)
		return
	}
	c.tempDir = ""
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the last lines written to path since offset from, for
// error messages that let the user see why the server did not start.
func logTail(path string, from int64) string {
	const maxBytes = 4 << 10
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	size := fileSize(path)
	if size-from > maxBytes {
		from = size - maxBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return "(cannot read log: " + err.Error() + ")"
	}
	b, err := io.ReadAll(io.LimitReader(f, maxBytes))
	if err != nil {
		return "(cannot read log: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}
