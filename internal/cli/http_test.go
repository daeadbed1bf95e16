package cli

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/health"
)

// healthcheck runs `t healthcheck args...` as a binary would and returns its output and error.
func healthcheck(args ...string) (string, error) {
	root := &cobra.Command{Use: "t", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(HealthcheckCommand())
	Setup(root, "t")
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"healthcheck"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestHealthcheck(t *testing.T) {
	srv, err := StartHTTP(t.Context(), HTTP{Addr: "127.0.0.1:0"}, "t", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	_, port, _ := strings.Cut(srv.Addr(), ":")

	// Starting: /readyz is 503, the command fails saying why.
	if _, err := healthcheck("--http", ":"+port); err == nil || !strings.Contains(err.Error(), "503") ||
		!strings.Contains(err.Error(), `"process":"starting"`) {
		t.Errorf("healthcheck of a process not ready: %v", err)
	}
	// Alive all the same.
	if out, err := healthcheck("--http", ":"+port, "--path", "/healthz"); err != nil || out != "ok\n" {
		t.Errorf("healthcheck --path /healthz: %q, %v", out, err)
	}
	srv.AddProbes(health.Probe{Name: "database", Check: func(context.Context) error { return nil }})
	// The address from the environment, as in a container, on every interface: asked on loopback.
	t.Setenv(HTTPAddrEnv, "0.0.0.0:"+port)
	if out, err := healthcheck(); err != nil || !strings.Contains(out, `"ready":true`) {
		t.Errorf("healthcheck with %s set: %q, %v", HTTPAddrEnv, out, err)
	}
	if out, err := healthcheck("--url", "http://"+srv.Addr()+"/readyz"); err != nil || !strings.Contains(out, `"ready":true`) {
		t.Errorf("healthcheck --url: %q, %v", out, err)
	}
	t.Setenv(HTTPAddrEnv, "")
	if _, err := healthcheck(); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("healthcheck with no address: %v, want an error naming --http", err)
	}
	srv.Stop(context.Background())
	if _, err := healthcheck("--http", ":"+port); err == nil {
		t.Error("healthcheck succeeded with nothing listening")
	}
}

func TestStartHTTP(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, err := StartHTTP(t.Context(), HTTP{}, "t", log)
	if err != nil || srv != nil {
		t.Errorf("no --http: %v, %v; want no listener and no error", srv, err)
	}
	if _, err := StartHTTP(t.Context(), HTTP{Pprof: true}, "t", log); err == nil || !strings.Contains(err.Error(), "--http") {
		t.Errorf("--pprof without --http: %v, want an error naming --http", err)
	}
	if _, err := StartHTTP(t.Context(), HTTP{Addr: "localhost:http"}, "t", log); err == nil ||
		!strings.Contains(err.Error(), "--http") || !strings.Contains(err.Error(), HTTPAddrEnv) {
		t.Errorf("a bad --http: %v, want an error naming the flag and its variable", err)
	}
}
