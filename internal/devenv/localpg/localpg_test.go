package localpg_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/localpg"
)

func start(t *testing.T, cfg localpg.Config) *localpg.Cluster {
	t.Helper()
	c, err := localpg.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, c *localpg.Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to %s: %v", c.URL("postgres"), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, c *localpg.Cluster) int {
	t.Helper()
	conn := connect(t, c)
	var n int
	if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatalf("count rows: %v", err)
	}
	return n
}

// persistentDir returns a data directory the postgres OS user can reach
// when the tests run as root (t.TempDir() is root's and 0700).
func persistentDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agate-localpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "data")
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	dir, err := localpg.FindBinDir(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestStartConnectStop(t *testing.T) {
	t.Parallel()
	c, err := localpg.Start(t.Context(), localpg.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}

	conn, err := pgx.Connect(t.Context(), c.URL("postgres"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	var fsync, listen string
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('fsync'), current_setting('listen_addresses')").
		Scan(&fsync, &listen); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" || listen != "127.0.0.1" {
		t.Errorf("fsync=%q listen_addresses=%q, want off and 127.0.0.1", fsync, listen)
	}
	var maxConns int
	if err := conn.QueryRow(t.Context(), "SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	if maxConns != 200 {
		t.Errorf("max_connections = %d, want 200", maxConns)
	}
	_ = conn.Close(t.Context())

	dataDir := c.DataDir()
	if err := c.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary data directory %s still there after Stop (stat: %v)", dataDir, err)
	}
	if err := c.Stop(t.Context()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestRestartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	c := start(t, localpg.Config{Logger: testLogger(t)})
	port := c.Port()
	exec(t, connect(t, c), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")

	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Port() != port {
		t.Errorf("port changed from %d to %d on Restart", port, c.Port())
	}
	if n := count(t, c); n != 1 {
		t.Errorf("rows after restart = %d, want 1", n)
	}
}

func TestKillThenRestartRecovers(t *testing.T) {
	t.Parallel()
	c := start(t, localpg.Config{Logger: testLogger(t)})
	conn := connect(t, c)
	// synchronous_commit is off cluster-wide; a crash may lose the last
	// commits unless this session asks for them to reach the WAL.
	exec(t, conn, "SET synchronous_commit = on")
	exec(t, conn, "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2)")

	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Fatal("connection still works after Kill")
	}
	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	if n := count(t, c); n != 2 {
		t.Errorf("rows after crash recovery = %d, want 2", n)
	}
}

func TestRestartImmediateRecovers(t *testing.T) {
	t.Parallel()
	c := start(t, localpg.Config{Logger: testLogger(t)})
	port := c.Port()
	conn := connect(t, c)
	exec(t, conn, "SET synchronous_commit = on")
	exec(t, conn, "CREATE TABLE t (id int); INSERT INTO t VALUES (1), (2), (3)")

	if err := c.RestartImmediate(t.Context(), 200*time.Millisecond); err != nil {
		t.Fatalf("RestartImmediate: %v", err)
	}
	if err := conn.Ping(t.Context()); err == nil {
		t.Error("a session survived the immediate stop")
	}
	if c.Port() != port {
		t.Errorf("port changed from %d to %d", port, c.Port())
	}
	if n := count(t, c); n != 3 {
		t.Errorf("rows after the immediate restart = %d, want 3", n)
	}
	b, err := os.ReadFile(filepath.Join(c.DataDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "not properly shut down") {
		t.Errorf("postgres.log shows no crash recovery after -m immediate:\n%s", b)
	}
	// A stopped server is simply started.
	if err := c.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartImmediate(t.Context(), 0); err != nil {
		t.Fatalf("RestartImmediate of a killed server: %v", err)
	}
	if n := count(t, c); n != 3 {
		t.Errorf("rows after kill and immediate restart = %d, want 3", n)
	}
}

func TestDataDirReuse(t *testing.T) {
	t.Parallel()
	dir := persistentDir(t)
	ctx := t.Context()

	c, err := localpg.Start(ctx, localpg.Config{DataDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("first Start: %v", err)
	}
	port := c.Port()
	exec(t, connect(t, c), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)")
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatalf("persistent data directory gone after Stop: %v", err)
	}

	// Port 0 on an existing directory reuses the recorded port (free here,
	// unless another test grabbed it in between, so don't insist).
	c, err = localpg.Start(ctx, localpg.Config{DataDir: dir, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("second Start: %v", err)
	}
	if c.Port() != port {
		t.Logf("port %d was not reused (now %d); fine if something else took it", port, c.Port())
	}
	if n := count(t, c); n != 1 {
		t.Errorf("rows after reuse = %d, want 1", n)
	}

	// A kill -9 leaves postmaster.pid behind; a fresh Start must cope.
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); err != nil {
		t.Fatalf("expected a stale postmaster.pid after Kill: %v", err)
	}
	c = start(t, localpg.Config{DataDir: dir, Logger: testLogger(t)})
	if n := count(t, c); n != 1 {
		t.Errorf("rows after kill and fresh Start = %d, want 1", n)
	}
}

func TestStartLeftRunning(t *testing.T) {
	t.Parallel()
	dir := persistentDir(t)
	// The first cluster is never stopped, as when a dev process crashes;
	// starting again on the same directory takes it over.
	if _, err := localpg.Start(t.Context(), localpg.Config{DataDir: dir, Logger: testLogger(t)}); err != nil {
		t.Fatalf("first Start: %v", err)
	}
	c := start(t, localpg.Config{DataDir: dir, Logger: testLogger(t)})
	var one int
	if err := connect(t, c).QueryRow(t.Context(), "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
}
