package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/node"
)

// devHTTPAddr is --http's default in dev mode, where the listener is on; `run` has none unless
// asked.
const devHTTPAddr = "127.0.0.1:8080"

// addHTTPFlags adds --http and --pprof to cmd, --http defaulting to def.
func addHTTPFlags(cmd *cobra.Command, o *options, def string) {
	cli.AddHTTPFlags(cmd.Flags(), &o.http, def)
}

// serveHTTP starts the node's HTTP listener, when --http asks for one, and has cfg's node fill
// in its readiness and record its metrics there. stop stops it; call it after the node stopped,
// so that /readyz says the node is stopping meanwhile.
func serveHTTP(ctx context.Context, o *options, log *slog.Logger, cfg *node.Config) (stop func(), err error) {
	srv, err := cli.StartHTTP(ctx, o.http, "agate-scheduler", log)
	if err != nil {
		return nil, err
	}
	cfg.Health, cfg.MeterProvider = &node.Health{}, srv.MeterProvider()
	srv.AddProbes(cfg.Health.Probes()...)
	return func() { srv.Stop(ctx) }, nil
}
