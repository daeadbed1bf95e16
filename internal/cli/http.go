package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agatesched/agate/internal/httpserve"
)

// Environment variables of the HTTP listener's flags.
const (
	HTTPAddrEnv = "AGATE_HTTP_ADDR"
	PprofEnv    = "AGATE_PPROF"
)

// HTTP is the setting of a process's HTTP listener: --http and --pprof.
type HTTP struct {
	Addr  string
	Pprof bool
}

// AddHTTPFlags adds --http (AGATE_HTTP_ADDR) and --pprof (AGATE_PPROF) to fs; def is --http's
// default ("" for off).
func AddHTTPFlags(fs *pflag.FlagSet, h *HTTP, def string) {
	fs.StringVar(&h.Addr, "http", def, "address of the HTTP listener serving /healthz, /readyz and /metrics (Prometheus): "+
		"host:port, or :port or port alone for 127.0.0.1 (0.0.0.0:port listens on every interface); empty: none")
	BindEnv(fs, "http", HTTPAddrEnv)
	fs.BoolVar(&h.Pprof, "pprof", false, "also serve Go's profiles under /debug/pprof/ on the --http listener")
	BindEnv(fs, "pprof", PprofEnv)
}

// StartHTTP starts the listener h asks for, serving the metrics of service; it returns a nil
// *httpserve.Server (whose methods do nothing) when h has no address.
func StartHTTP(ctx context.Context, h HTTP, service string, log *slog.Logger) (*httpserve.Server, error) {
	if h.Addr == "" {
		if h.Pprof {
			return nil, errors.New("--pprof serves the profiles on the --http listener: set --http (" + HTTPAddrEnv + ") too")
		}
		return nil, nil
	}
	srv, err := httpserve.Start(ctx, httpserve.Config{Addr: h.Addr, Pprof: h.Pprof, Service: service, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--http (%s): %w", HTTPAddrEnv, err)
	}
	return srv, nil
}

// HealthcheckCommand is the `healthcheck` command of a binary whose image has no shell or HTTP
// client (the distroless image): it asks the process's /readyz and exits 0 when it is ready,
// 1 otherwise, printing the report, as a container health check needs.
func HealthcheckCommand() *cobra.Command {
	var addr, url, path string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the process listening on --http is ready (its /readyz answers 200), else 1",
		Long: `Asks the /readyz endpoint of a running Agate process and exits 0 when it answers 200 (ready),
1 otherwise (not ready, or nothing answering), printing what it answered. It is the container
health check of an image with no shell or HTTP client: run it beside the process, with the
same ` + HTTPAddrEnv + `, and it asks the process's listener on this machine (0.0.0.0:port is asked
on 127.0.0.1:port).`,
		Example: `  scheduler healthcheck                     # the listener named by ` + HTTPAddrEnv + `
  worker healthcheck --http :8080
  scheduler healthcheck --url http://10.0.0.5:8080/healthz`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			u := url
			if u == "" {
				if addr == "" {
					return errors.New("no listener to ask: set --http (" + HTTPAddrEnv + ") or --url")
				}
				var err error
				if u, err = httpserve.URL(addr, path); err != nil {
					return fmt.Errorf("--http: %w", err)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			body, err := httpserve.Get(ctx, u)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(body)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "http", "", "the --http address of the process to check")
	BindEnv(f, "http", HTTPAddrEnv)
	f.StringVar(&path, "path", "/readyz", "the endpoint to ask (/healthz: alive, whether or not ready)")
	f.StringVar(&url, "url", "", "the full URL to ask instead (--http and --path are then ignored)")
	f.DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}
