package health

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when its tests leave goroutines running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func probe(name string, err error) Probe {
	return Probe{Name: name, Check: func(context.Context) error { return err }}
}

func TestCheck(t *testing.T) {
	down := errors.New("connection refused")
	for _, tc := range []struct {
		name   string
		probes []Probe
		ready  bool
		checks map[string]string
	}{
		{"no probes: starting", nil, false, map[string]string{"process": NotStarted}},
		{"all pass", []Probe{probe("database", nil), probe("cluster", nil)}, true,
			map[string]string{"database": OK, "cluster": OK}},
		{"one fails", []Probe{probe("database", down), probe("cluster", nil)}, false,
			map[string]string{"database": "connection refused", "cluster": OK}},
		{"an empty error still fails", []Probe{probe("loops", errors.New(""))}, false, map[string]string{"loops": "failed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(t.Context(), time.Second, tc.probes)
			if r.Ready != tc.ready || len(r.Checks) != len(tc.checks) {
				t.Fatalf("report %+v, want ready=%v checks %v", r, tc.ready, tc.checks)
			}
			for k, v := range tc.checks {
				if r.Checks[k] != v {
					t.Errorf("checks[%s] = %q, want %q", k, r.Checks[k], v)
				}
			}
		})
	}
}

// A probe that hangs past the timeout is reported as such, and does not hold the report; the
// probes run at once, so two slow ones take one timeout, not two.
func TestCheckTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hang := Probe{Name: "jetstream", Check: func(context.Context) error { <-release; return nil }}
	slow := Probe{Name: "database", Check: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }}
	start := time.Now()
	r := Check(t.Context(), 100*time.Millisecond, []Probe{hang, slow, probe("cluster", nil)})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Check took %s with a timeout of 100ms", took)
	}
	// The probe that honours its context returns its error as the timeout passes: either is right.
	if r.Ready || r.Checks["jetstream"] != "no answer within 100ms" || r.Checks["cluster"] != OK || r.Checks["database"] == OK {
		t.Errorf("report %+v", r)
	}
}

func TestLongReasonsAreCut(t *testing.T) {
	r := Check(t.Context(), time.Second, []Probe{probe("database", errors.New(strings.Repeat("é", 300)))})
	got := r.Checks["database"]
	if len(got) > maxReason+len("…") || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Errorf("reason of %d bytes: %q", len(got), got)
	}
}
