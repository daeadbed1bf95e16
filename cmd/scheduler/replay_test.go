package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/agatesched/agate/internal/devenv/testenv"
	"github.com/agatesched/agate/internal/replay"
	"github.com/agatesched/agate/internal/store"
)

// runReplay runs `scheduler replay` as a process and returns its output and exit status.
func runReplay(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"replay"}, args...)...)
	cmd.Env = append(os.Environ(), "AGATE_SCHEDULER_RUN_MAIN=1", "DATABASE_URL=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("running replay: %v", err)
	return "", 0
}

// TestReplayExitStatus: equal is 0, a difference is 1 with the row printed, and a replay that
// cannot run is 2 with the reason.
func TestReplayExitStatus(t *testing.T) {
	url := testenv.MigratedDatabase(t)
	out, code := runReplay(t, "--database-url", url, "--namespace", "ns1")
	if code != 0 || !strings.Contains(out, "equal") {
		t.Fatalf("replay of an empty namespace: status %d\n%s", code, out)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `insert into calendars (sched_name, calendar_name, calendar) values ('ns1', 'by-hand', '{}')`); err != nil {
		t.Fatal(err)
	}
	out, code = runReplay(t, "--database-url", url, "--namespace", "ns1")
	if code != 1 || !strings.Contains(out, "calendars by-hand: only in the live table") {
		t.Fatalf("replay after a write that was not logged: status %d\n%s", code, out)
	}
	// With a snapshot, replay starts from it; --from-start applies the whole log.
	pool, err := store.Open(t.Context(), url, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := replay.TakeSnapshot(t.Context(), pool, "ns2"); err != nil {
		t.Fatal(err)
	}
	if out, code := runReplay(t, "--database-url", url, "--namespace", "ns2"); code != 0 || !strings.Contains(out, "from the snapshot of") {
		t.Fatalf("replay of a namespace with a snapshot: status %d\n%s", code, out)
	}
	if out, code := runReplay(t, "--database-url", url, "--namespace", "ns2", "--from-start"); code != 0 || !strings.Contains(out, "from the start of the log") {
		t.Fatalf("replay --from-start: status %d\n%s", code, out)
	}
	out, code = runReplay(t, "--database-url", url, "--namespace", "not a namespace")
	if code != 2 || !strings.Contains(out, "namespace") {
		t.Fatalf("replay of a bad namespace: status %d\n%s", code, out)
	}
	out, code = runReplay(t, "--namespace", "ns1")
	if code != 2 || !strings.Contains(out, "DATABASE_URL") {
		t.Fatalf("replay without a database: status %d\n%s", code, out)
	}
}
