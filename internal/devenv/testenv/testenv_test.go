package testenv_test

import (
	"context"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func TestDatabaseIsolation(t *testing.T) {
	t.Parallel()
	a, b := testenv.Database(t), testenv.Database(t)
	if a == b {
		t.Fatalf("two calls returned the same database %s", a)
	}
	ca, cb := connect(t, a), connect(t, b)
	if _, err := ca.Exec(t.Context(), "CREATE TABLE only_in_a (id int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := cb.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("table created in database A is visible in database B")
	}
	if err := cb.QueryRow(t.Context(),
		"SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("new database has %d tables in public, want 0", n)
	}
}

func TestDatabaseDroppedAfterTest(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("uses", func(t *testing.T) {
		conn := connect(t, testenv.Database(t))
		if err := conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		// The connection stays open: the drop must force it out. (Its own
		// Cleanup runs first here, so open a second, forgotten one.)
		if _, err := pgx.Connect(t.Context(), testenv.Database(t)); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.HasPrefix(name, "test_testdatabasedroppedaftertest_uses_") {
		t.Errorf("database name %q does not say which test it belongs to", name)
	}
	var exists bool
	if err := connect(t, testenv.Database(t)).QueryRow(t.Context(),
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", name)
	}
}

var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func TestNamespace(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		ns := testenv.Namespace(t)
		if !namespaceRE.MatchString(ns) {
			t.Fatalf("Namespace() = %q, not [A-Za-z0-9_-]{1,64}", ns)
		}
		if seen[ns] {
			t.Fatalf("Namespace() repeated %q", ns)
		}
		seen[ns] = true
	}
	t.Run(strings.Repeat("very/long name.with*odd>chars ", 5), func(t *testing.T) {
		if ns := testenv.Namespace(t); !namespaceRE.MatchString(ns) {
			t.Errorf("Namespace() = %q, not [A-Za-z0-9_-]{1,64}", ns)
		}
	})
}

func TestNATSSharedJetStream(t *testing.T) {
	t.Parallel()
	url := testenv.NATS(t)
	if again := testenv.NATS(t); again != url {
		t.Errorf("NATS() returned %s then %s; want one shared server", url, again)
	}
	_, js := testenv.JetStream(t, url)
	ns := testenv.Namespace(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: ns, Subjects: []string{ns + ".>"},
	}); err != nil {
		t.Fatalf("CreateStream %s: %v", ns, err)
	}
	if _, err := js.Publish(t.Context(), ns+".x", []byte("x")); err != nil {
		t.Fatal(err)
	}
}

func TestStartNATSRestart(t *testing.T) {
	t.Parallel()
	s := testenv.StartNATS(t)
	if s.URL() == testenv.NATS(t) {
		t.Fatal("StartNATS returned the shared server")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatalf("connect after Restart: %v", err)
	}
	nc.Close()
}

func TestStartPostgres(t *testing.T) {
	t.Parallel()
	c := testenv.StartPostgres(t)
	conn := connect(t, c.URL("postgres"))
	if _, err := conn.Exec(t.Context(), "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}

func TestDatabaseFromTemplate(t *testing.T) {
	t.Parallel()
	var setups atomic.Int32
	setup := func(ctx context.Context, url string) error {
		setups.Add(1)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE seeded (id int); INSERT INTO seeded VALUES (1)")
		return err
	}
	// A fixed key: on a DATABASE_URL server the template stays for the next
	// run, which then skips setup.
	const key = "testenv-selftest-v1"

	var wg sync.WaitGroup
	urls := make([]string, 4)
	for i := range urls {
		wg.Go(func() { urls[i] = testenv.DatabaseFromTemplate(t, key, setup) })
	}
	wg.Wait()
	if n := setups.Load(); n > 1 {
		t.Errorf("setup ran %d times, want at most once", n)
	}

	a, b := connect(t, urls[0]), connect(t, urls[1])
	if _, err := a.Exec(t.Context(), "INSERT INTO seeded VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(t.Context(), "SELECT count(*) FROM seeded").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("copy B has %d rows, want the template's 1 (copies must be independent)", n)
	}
}
