package httpserve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/agatesched/agate/internal/health"
	"github.com/agatesched/agate/internal/telemetry"
)

// TestMain fails the package when its tests leave goroutines running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"8080":           "127.0.0.1:8080",
		":8080":          "127.0.0.1:8080",
		":0":             "127.0.0.1:0",
		"0.0.0.0:9090":   "0.0.0.0:9090",
		"[::]:9090":      "[::]:9090",
		"[::1]:9090":     "[::1]:9090",
		"10.1.2.3:80":    "10.1.2.3:80",
		"localhost:8080": "localhost:8080",
	} {
		got, err := ListenAddr(in)
		if err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "host:http", ":65536", "a:b:c", "http://127.0.0.1:8080"} {
		if got, err := ListenAddr(bad); err == nil {
			t.Errorf("ListenAddr(%q) = %q, want an error", bad, got)
		}
	}
}

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		":8080":        "http://127.0.0.1:8080/readyz",
		"0.0.0.0:8080": "http://127.0.0.1:8080/readyz",
		"[::]:8080":    "http://[::1]:8080/readyz",
		"10.0.0.5:80":  "http://10.0.0.5:80/readyz",
	} {
		if got, err := URL(in, "/readyz"); err != nil || got != want {
			t.Errorf("URL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// start runs a listener on a free loopback port until the test ends.
func start(t *testing.T, pprof bool) *Server {
	t.Helper()
	s, err := Start(t.Context(), Config{Addr: ":0", Pprof: pprof, Service: "test", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(context.Background()) })
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("a port alone listens on %s, want loopback", s.Addr())
	}
	return s
}

func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestEndpoints(t *testing.T) {
	s := start(t, false)
	if code, body := get(t, s, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}

	// Before the process added its probes, it is starting: not ready.
	code, body := get(t, s, "/readyz")
	var rep health.Report
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != 503 || rep.Ready || rep.Checks["process"] != health.NotStarted {
		t.Errorf("/readyz with no probes: %d %s (%v)", code, body, err)
	}
	var dbErr error = errors.New("dial tcp 127.0.0.1:5432: connection refused")
	s.AddProbes(health.Probe{Name: "database", Check: func(context.Context) error { return dbErr }},
		health.Probe{Name: "cluster", Check: func(context.Context) error { return nil }})
	code, body = get(t, s, "/readyz")
	if err := json.Unmarshal([]byte(body), &rep); err != nil || code != 503 || rep.Ready ||
		rep.Checks["database"] != dbErr.Error() || rep.Checks["cluster"] != health.OK {
		t.Errorf("/readyz with the database down: %d %s (%v)", code, body, err)
	}
	dbErr = nil
	if code, body = get(t, s, "/readyz"); code != 200 || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz with every probe passing: %d %s", code, body)
	}

	// The metrics of the server's provider, in Prometheus's text format and names.
	c := telemetry.Counter(telemetry.Meter(s.MeterProvider(), "test"), "agate.test.things", "{thing}", "things counted by the test")
	c.Add(t.Context(), 3)
	code, body = get(t, s, "/metrics")
	for _, want := range []string{"# TYPE agate_test_things_total counter", "agate_test_things_total 3", "go_goroutines", `service_name="test"`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics: %d, no %q in:\n%s", code, want, body)
		}
	}
	if code, _ := get(t, s, "/debug/pprof/"); code != 404 {
		t.Errorf("/debug/pprof/ without --pprof: %d, want 404", code)
	}
}

func TestPprofWhenEnabled(t *testing.T) {
	s := start(t, true)
	if code, body := get(t, s, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d %.200s", code, body)
	}
	if code, _ := get(t, s, "/debug/pprof/goroutine?debug=1"); code != 200 {
		t.Errorf("/debug/pprof/goroutine: %d", code)
	}
	if code, _ := get(t, s, "/debug/pprof/cmdline"); code == 200 {
		t.Error("/debug/pprof/cmdline is served; the command line may hold a password")
	}
}

// Get, as the healthcheck commands use it: the body of a 2xx, an error carrying the body
// otherwise, and an error when nothing listens.
func TestGet(t *testing.T) {
	s := start(t, false)
	if _, err := Get(t.Context(), "http://"+s.Addr()+"/healthz"); err != nil {
		t.Errorf("/healthz: %v", err)
	}
	if _, err := Get(t.Context(), "http://"+s.Addr()+"/readyz"); err == nil || !strings.Contains(err.Error(), "503") ||
		!strings.Contains(err.Error(), `"process":"starting"`) {
		t.Errorf("/readyz while starting: %v", err)
	}
	addr := s.Addr()
	s.Stop(t.Context())
	if _, err := Get(t.Context(), "http://"+addr+"/healthz"); err == nil {
		t.Error("a stopped listener answered")
	}
	var nilServer *Server
	nilServer.AddProbes(health.Probe{})
	nilServer.Stop(t.Context())
	if nilServer.MeterProvider() != nil || nilServer.Addr() != "" {
		t.Error("a nil Server is not inert")
	}
}
