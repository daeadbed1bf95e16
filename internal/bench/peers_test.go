package bench

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agatesched/agate/internal/devenv/testenv"
)

// River's burst harness runs end to end on a real PostgreSQL: every job runs once (about 10 s:
// 2 s for leader election, a 5 s lead to T0).
func TestRiverBurstSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	inf := &infra{baseURL: testenv.Database(t)}
	defer inf.close(log)
	b := &bench{o: Config{Timeout: time.Minute}, inf: inf, log: log}
	r, err := b.runRiverBurst(ctx, 300, 2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Peer != "river" || r.Version == "" || r.Jobs != 300 || r.Procs != 2 {
		t.Errorf("result does not describe the run: %+v", r)
	}
	if r.Missing != 0 || r.Duplicates != 0 || r.PerSec <= 0 || r.MaxMs < r.P50Ms {
		t.Errorf("figures: %+v", r)
	}
}

func TestJDBCURL(t *testing.T) {
	jdbc, user, pw, err := jdbcURL("postgres://bench:s%40cret@127.0.0.1:5433/agatebench_1?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if jdbc != "jdbc:postgresql://127.0.0.1:5433/agatebench_1?sslmode=disable" || user != "bench" || pw != "s@cret" {
		t.Errorf("got %q %q %q", jdbc, user, pw)
	}
}

// Without Java the Quartz peer says what to install rather than failing somewhere inside.
func TestQuartzUnavailable(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	b := &bench{inf: &infra{}, log: slog.New(slog.DiscardHandler)}
	_, err := b.runQuartzBurst(context.Background(), 10, 1)
	if !errors.Is(err, ErrPeerUnavailable) {
		t.Fatalf("got %v, want ErrPeerUnavailable", err)
	}
}

// The postmaster whose CPU is reported is the one postmaster.pid names only when the file is
// the connected server's: the same port and a start within a second.
func TestPostmasterPIDsChecksTheServer(t *testing.T) {
	dir := t.TempDir()
	if got := postmasterPIDs(dir, "5432", 1764400000); got != nil {
		t.Errorf("no postmaster.pid: %v, want nil", got)
	}
	pidFile := "4242\n" + dir + "\n1764400000\n5432\n/var/run/postgresql\n127.0.0.1\n  1234567         0\nready   \n"
	if err := os.WriteFile(filepath.Join(dir, "postmaster.pid"), []byte(pidFile), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		port    string
		started int64
		want    []int
	}{
		{"5432", 1764400000, []int{4242}},
		{"5432", 1764400001, []int{4242}},
		{"5432", 1764399999, []int{4242}},
		{"5433", 1764400000, nil},
		{"5432", 1764400002, nil},
	} {
		if got := postmasterPIDs(dir, c.port, c.started); !slices.Equal(got, c.want) {
			t.Errorf("port %s, started %d: %v, want %v", c.port, c.started, got, c.want)
		}
	}
	if got := postmasterPIDs("", "5432", 1764400000); got != nil {
		t.Errorf("no data directory: %v, want nil", got)
	}
}
