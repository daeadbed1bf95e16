// Package testenv gives tests real PostgreSQL and NATS JetStream servers.
// It is for _test.go files only.
//
// Each test binary shares one throwaway PostgreSQL cluster (started from the
// machine's binaries on first use, fsync off) and one embedded JetStream
// server; tests isolate themselves with their own database ([Database]) and
// their own namespace ([Namespace]). DATABASE_URL and NATS_URL point the
// tests at existing servers instead. Failure tests that stop or restart a
// server get a private one from [StartPostgres] or [StartNATS].
//
// A package that uses the shared servers needs
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// so they are stopped, and their files removed, when its tests are done.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agatesched/agate/internal/devenv/localpg"
	"github.com/agatesched/agate/internal/devenv/natsembed"
)

// mainCalled records that the package's TestMain uses [Main], without which
// the shared servers would outlive the test binary.
var mainCalled atomic.Bool

// Main runs the package's tests and then stops the shared servers. Call it
// from TestMain.
//
// When the tests passed, it then fails the package if a goroutine the tests started is still
// running: a loop that outlives its context is a bug a test should show.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	process.cleanup()
	shutdown()
	if code == 0 {
		// A stopped nats-server ends some goroutines after Shutdown returns (a stream's state
		// flusher, the process-wide access-time ticker): look again for up to 10 s (each Find
		// retries for about 2 s itself) before calling them leaked.
		err := goleak.Find(LeakOptions()...)
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline); {
			err = goleak.Find(LeakOptions()...)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines left running after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// LeakOptions are the goroutines the leak check ignores: ones that libraries start once per
// process and never stop. Packages that do not use [Main] check with
// goleak.VerifyTestMain(m, testenv.LeakOptions()...).
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		// The watchdog that stops the shared servers if this process dies waits for it by design.
		goleak.IgnoreAnyFunction("github.com/agatesched/agate/internal/devenv/testenv.startWatchdog.func1"),
		// nats-server's own: the process-wide access-time ticker, and a stopped stream's state
		// flusher, which on a loaded 2-core CI machine outlived Main's 10 s of looking again
		// (internal/events, 2026-11-29). Neither is a goroutine of ours.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
	}
}

func requireMain(t testing.TB) {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("testenv: add `func TestMain(m *testing.M) { testenv.Main(m) }` to a _test.go file of this package " +
			"so the shared PostgreSQL and NATS servers are stopped when its tests finish")
	}
}

var shared struct {
	pgOnce  sync.Once
	pg      *localpg.Cluster
	pgAdmin *pgxpool.Pool
	pgBase  *url.URL // server URL; Database swaps the database name
	pgErr   error
	// createOpts ends CREATE DATABASE: STRATEGY FILE_COPY (PostgreSQL 15+)
	// copies a small database in half the time of the default WAL_LOG.
	createOpts string
	templates  sync.Map // key → *template

	natsOnce sync.Once
	nats     *natsembed.Server
	natsURL  string
	natsDir  string
	natsErr  error
}

func shutdown() {
	if shared.pgAdmin != nil {
		shared.pgAdmin.Close()
	}
	if shared.pg != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := shared.pg.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop shared PostgreSQL: %v\n", err)
		}
	}
	if shared.nats != nil {
		shared.nats.Shutdown()
		_ = os.RemoveAll(shared.natsDir)
	}
}

// Database creates an empty database for this test on the shared cluster
// (or on the DATABASE_URL server) and returns its URL. The database is
// dropped when the test ends, even if connections are still open.
func Database(t testing.TB) string {
	t.Helper()
	sharedPostgres(t)
	// template0 is empty whatever someone installed into template1.
	return createDatabase(t, "template0")
}

// DatabaseFromTemplate is [Database] for tests that need a prepared schema:
// the first call for key creates a template database and runs setup on it
// (e.g. migrations), and every call returns a fresh copy of it, which is
// much faster than running setup per test. setup must close its
// connections before returning.
//
// key names the template and must change whenever setup's result does (a
// hash of the migration files, say): on a DATABASE_URL server the template
// outlives the test run and is reused by later runs with the same key.
func DatabaseFromTemplate(t testing.TB, key string, setup func(ctx context.Context, url string) error) string {
	t.Helper()
	sharedPostgres(t)
	v, _ := shared.templates.LoadOrStore(key, &template{})
	tmpl := v.(*template)
	tmpl.once.Do(func() { tmpl.name, tmpl.err = createTemplate(key, setup) })
	if tmpl.err != nil {
		t.Fatalf("testenv: prepare template database for %q: %v", key, tmpl.err)
	}
	return createDatabase(t, tmpl.name)
}

type template struct {
	once sync.Once
	name string
	err  error
}

func sharedPostgres(t testing.TB) {
	t.Helper()
	requireMain(t)
	shared.pgOnce.Do(startSharedPostgres)
	if shared.pgErr != nil {
		t.Fatalf("testenv: %v", shared.pgErr)
	}
}

func createDatabase(t testing.TB, from string) string {
	t.Helper()
	name := "test_" + strings.ToLower(sanitize(t.Name(), 40)) + "_" + randomHex(4)
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := shared.pgAdmin.Exec(ctx, "CREATE DATABASE "+ident+
		" TEMPLATE "+pgx.Identifier{from}.Sanitize()+shared.createOpts); err != nil {
		t.Fatalf("testenv: create database %s on %s: %v (the role needs CREATEDB)", name, redacted(shared.pgBase), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := shared.pgAdmin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return databaseURL(name)
}

func databaseURL(name string) string {
	u := *shared.pgBase
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

// createTemplate makes (or, on a server that has it from an earlier run,
// finds) the template database for key. An advisory lock keeps concurrent
// test binaries sharing a DATABASE_URL server from building it twice.
func createTemplate(key string, setup func(ctx context.Context, url string) error) (string, error) {
	name := "tmpl_" + strings.ToLower(sanitize(key, 40)) + "_" + shortHash(key)
	ident := pgx.Identifier{name}.Sanitize()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	conn, err := shared.pgAdmin.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name); err != nil {
		return "", err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtext($1))", name) }()

	// Only a template whose setup finished is marked datistemplate.
	var ready bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1 AND datistemplate)",
		name).Scan(&ready); err != nil {
		return "", err
	}
	if ready {
		return name, nil
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0"+shared.createOpts); err != nil {
		return "", fmt.Errorf("create database %s: %w (the role needs CREATEDB)", name, err)
	}
	if err := setup(ctx, databaseURL(name)); err != nil {
		return "", fmt.Errorf("setup: %w", err)
	}
	// Copying needs the template to have no sessions; setup's must be gone.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name); err != nil {
		return "", err
	}
	return name, nil
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

func startSharedPostgres() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	base := os.Getenv("DATABASE_URL")
	if base == "" {
		c, err := localpg.Start(ctx, localpg.Config{})
		if err != nil {
			shared.pgErr = fmt.Errorf("start a throwaway PostgreSQL for the tests (or set DATABASE_URL to an existing server): %w", err)
			return
		}
		shared.pg = c
		watchCluster(c)
		base = c.URL("postgres")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		shared.pgErr = fmt.Errorf("DATABASE_URL must be a postgres:// URL, e.g. postgres://user:pass@localhost:5432/postgres")
		return
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		shared.pgErr = fmt.Errorf("parse DATABASE_URL: %w", err)
		return
	}
	cfg.MaxConns = 4 // only CREATE/DROP DATABASE go through it
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		hint := ""
		if shared.pg == nil {
			hint = " (is that server running? unset DATABASE_URL to let the tests start their own)"
		}
		shared.pgErr = fmt.Errorf("connect to PostgreSQL at %s: %w%s", redacted(u), err, hint)
		return
	}
	var version int
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		pool.Close()
		shared.pgErr = fmt.Errorf("query PostgreSQL version at %s: %w", redacted(u), err)
		return
	}
	if version >= 150000 {
		shared.createOpts = " STRATEGY FILE_COPY"
	}
	shared.pgAdmin, shared.pgBase = pool, u
}

// watchCluster starts a detached shell that stops the shared cluster and
// removes its files if this test binary dies without running Main's cleanup
// (a test timeout panic, kill -9), so crashed runs do not pile up servers.
func watchCluster(c *localpg.Cluster) {
	dataDir := c.DataDir()
	tempDir := filepath.Dir(dataDir)
	if !strings.HasPrefix(filepath.Base(tempDir), "agate-pg-") {
		return // not a directory we may delete
	}
	const script = `pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) || exit 0
kill -QUIT "$pid" 2>/dev/null # immediate shutdown
while alive "$pid"; do sleep 0.1; done
rm -rf "$2"`
	startWatchdog(script, dataDir, tempDir)
}

// startWatchdog runs script, with args as $1…, once this process has died.
// Zombies count as dead: PID 1 in a container may never reap them.
func startWatchdog(script string, args ...string) {
	const wait = `alive() { kill -0 "$1" 2>/dev/null && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
while alive "$0"; do sleep 1; done
`
	cmd := exec.Command("/bin/sh", append([]string{"-c", wait + script, strconv.Itoa(os.Getpid())}, args...)...)
	// Its own session, so the Ctrl-C that kills us does not kill it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err == nil {
		go func() { _ = cmd.Wait() }() // reap it if it ends while we live
	}
}

// NATS returns the URL of the shared embedded JetStream server (or
// NATS_URL). Tests sharing it keep apart by using [Namespace] in their
// stream names and subjects.
func NATS(t testing.TB) string {
	t.Helper()
	requireMain(t)
	shared.natsOnce.Do(startSharedNATS)
	if shared.natsErr != nil {
		t.Fatalf("testenv: %v", shared.natsErr)
	}
	return shared.natsURL
}

func startSharedNATS() {
	if u := os.Getenv("NATS_URL"); u != "" {
		nc, err := nats.Connect(u, nats.Timeout(10*time.Second))
		if err != nil {
			shared.natsErr = fmt.Errorf("connect to NATS_URL %s: %w (unset NATS_URL to use an embedded server)", u, err)
			return
		}
		nc.Close()
		shared.natsURL = u
		return
	}
	dir, err := os.MkdirTemp("", "agate-testnats-")
	if err != nil {
		shared.natsErr = fmt.Errorf("create JetStream store directory: %w", err)
		return
	}
	s, err := natsembed.Start(natsembed.Config{StoreDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		shared.natsErr = fmt.Errorf("start embedded NATS server (or set NATS_URL): %w", err)
		return
	}
	shared.nats, shared.natsURL, shared.natsDir = s, s.URL(), dir
	// As for PostgreSQL: if we die before Main's cleanup, remove the store.
	startWatchdog(`rm -rf "$1"`, dir)
}

// JetStream connects to the NATS server at url (with opts) for the rest of the test and returns
// the connection and its JetStream context. Closing the connection earlier is allowed.
func JetStream(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("testenv: connect to NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("testenv: JetStream context: %v", err)
	}
	return nc, js
}

// Namespace returns a name unique to this call, made of the test's name and
// a random suffix, valid as an Agate namespace ([A-Za-z0-9_-]{1,64}).
func Namespace(t testing.TB) string {
	t.Helper()
	return sanitize(t.Name(), 48) + "-" + randomHex(4)
}

// StartNATS starts a private embedded JetStream server for a test that
// stops or restarts it. It is shut down when the test ends.
func StartNATS(t testing.TB) *natsembed.Server {
	t.Helper()
	s, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatalf("testenv: start embedded NATS server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// StartPostgres starts a private throwaway PostgreSQL cluster for a test
// that stops, kills or restarts it. It is stopped and removed when the test
// ends. Prefer [Database] otherwise: a cluster takes about a second to start.
//
// It runs with fsync and synchronous_commit on, as production does: a test that kills it must
// find every commit it was told of still there afterwards.
func StartPostgres(t testing.TB) *localpg.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := localpg.Start(ctx, localpg.Config{Fsync: true, Logger: testLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatalf("testenv: start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("testenv: stop PostgreSQL: %v", err)
		}
	})
	return c
}

var invalidNameChars = regexp.MustCompile(`[^A-Za-z0-9_]+`)

// sanitize turns a test name (with its "/" between subtests) into at most
// max characters from [A-Za-z0-9_].
func sanitize(name string, max int) string {
	s := strings.Trim(invalidNameChars.ReplaceAllString(name, "_"), "_")
	if len(s) > max {
		s = s[:max]
	}
	if s == "" {
		s = "t"
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}

// redacted is u without its password, for error messages.
func redacted(u *url.URL) string {
	if u == nil {
		return "(no URL)"
	}
	return u.Redacted()
}

// testLogger logs records at or above level to t.Log, and drops them once
// the test is over (servers may log from their goroutines while stopping;
// t.Log then would panic).
func testLogger(t testing.TB, level slog.Level) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.done.Store(true) }) // runs after the servers' cleanups
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

type tWriter struct {
	t    testing.TB
	done atomic.Bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	if !w.done.Load() {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
