package chaos

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// shortSeed is the seed of the run in `make test`; AGATE_CHAOS_SEED replays another one.
const shortSeed = 20261123

// TestChaosShort is the chaos suite's short run: about 95 s of load with at least 20 faults,
// about 2 minutes and a half in all. It fails, with the report, when an invariant breaks.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes 2.5 minutes")
	}
	seed := uint64(shortSeed)
	if s := os.Getenv("AGATE_CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("AGATE_CHAOS_SEED=%q: %v", s, err)
		}
	}
	dir, err := os.MkdirTemp("", "agate-chaos-test-")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	rep, err := Run(t.Context(), Config{
		Seed:         seed,
		Duration:     95 * time.Second,
		FaultsEvery:  3800 * time.Millisecond,
		DrainTimeout: 30 * time.Second,
		Dir:          dir,
		Logger:       slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, &out)
	if err != nil {
		t.Fatalf("chaos run (seed %d, logs in %s): %v", seed, dir, err)
	}
	switch {
	case rep.Failed():
		t.Errorf("an invariant broke; replay with AGATE_CHAOS_SEED=%d or %s\n%s", seed, rep.Config.Replay(), out.String())
	case len(rep.Faults) < 20:
		t.Errorf("only %d faults injected, want at least 20\n%s", len(rep.Faults), out.String())
	case !rep.Drained:
		t.Errorf("the cluster did not become quiet after the window\n%s", out.String())
	default:
		t.Logf("\n%s", out.String())
		_ = os.RemoveAll(dir)
	}
	// Every process started is gone.
	for _, p := range rep.procs {
		if err := syscall.Kill(p, 0); err == nil {
			t.Errorf("process %d still alive after Run", p)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}
