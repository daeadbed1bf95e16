package main

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/httpserve"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/webui"
)

// devHTTPAddr is --http's default in dev mode, where the listener is on; `run` has none unless
// asked.
const devHTTPAddr = "127.0.0.1:8080"

// addHTTPFlags adds --http and --pprof to cmd, --http defaulting to def, and the web UI's flags.
func addHTTPFlags(cmd *cobra.Command, o *options, def string) {
	f := cmd.Flags()
	cli.AddHTTPFlags(f, &o.http, def)
	f.BoolVar(&o.ui.on, "ui", true, "serve the web UI under /ui/ on the --http listener")
	cli.BindEnv(f, "ui", "AGATE_UI")
	f.StringVar(&o.ui.token, "ui-token", "", "token the web UI's write actions (pause, resume, trigger now, interrupt) must present; "+
		"empty: the UI is read-only. Prefer the environment variable: a flag shows in the process list")
	cli.BindEnv(f, "ui-token", "AGATE_UI_TOKEN")
	f.BoolVar(&o.ui.readOnly, "ui-read-only", false, "refuse the web UI's write actions, token or not")
	cli.BindEnv(f, "ui-read-only", "AGATE_UI_READ_ONLY")
	f.StringVar(&o.ui.traceURL, "trace-url", "", "link from each firing in the web UI to its trace: a URL with {traceId}, "+
		"e.g. http://localhost:16686/trace/{traceId} for Jaeger; empty: no links")
	cli.BindEnv(f, "trace-url", "AGATE_TRACE_URL")
}

// uiOptions are the web UI's flags.
type uiOptions struct {
	on       bool
	token    string
	readOnly bool
	traceURL string
}

// serveUI mounts the web UI on srv, when there is a listener and --ui, answering through the
// node that cfg configures.
func serveUI(srv *httpserve.Server, o *options, cfg *node.Config, log *slog.Logger) {
	ui := o.ui.config()
	if srv == nil || ui == nil {
		return
	}
	ui.Namespace, ui.Logger = cfg.Namespace, log
	cfg.API = webui.Serve(srv, *ui)
}

// config is the UI's configuration from the flags; nil with --ui=false.
func (u uiOptions) config() *webui.Config {
	if !u.on {
		return nil
	}
	return &webui.Config{Token: u.token, ReadOnly: u.readOnly, TraceURL: u.traceURL}
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
	serveUI(srv, o, cfg, log)
	return func() { srv.Stop(ctx) }, nil
}
