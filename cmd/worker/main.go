// Command worker runs Agate jobs: it pulls JobFired events from NATS JetStream, runs the handler
// registered for their job type (the built-in noop, sleep, log and http) and publishes
// JobCompleted or JobFailed. Start as many as the load needs; they share one durable consumer per
// job type. Settings come from flags or the environment; a flag wins over its variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/telemetry"
	"github.com/agatesched/agate/internal/worker"
)

func main() {
	cli.TuneGC()
	if err := newCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

// defaultNATSURL is nats.go's DefaultURL, the local server.
const defaultNATSURL = "nats://127.0.0.1:4222"

// options are the command's settings, filled from flags and then from the environment.
type options struct {
	natsURL, natsCreds, natsCA string
	namespace, instanceID      string
	concurrency, maxDeliver    int
	outcomeBatch               int
	ackWait, jobTimeout        time.Duration
	drainTimeout               time.Duration
	logLevel                   string
	httpAllow                  worker.HTTPAllowList
	http                       cli.HTTP // the HTTP listener: health, readiness, metrics
}

func newCommand() *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run Agate jobs published on NATS JetStream",
		Long: `worker pulls the JobFired events of one Agate namespace from NATS JetStream
(agate.<ns>.fired.<jobType>), runs each job with the handler of its type and publishes
JobCompleted or JobFailed on agate.<ns>.done.<jobType>. Job types: noop, sleep, log, http.

Run as many workers as needed: they share one durable consumer per job type. A job is acked only
after its outcome is published, so a worker that dies mid-job loses nothing: the job is
redelivered to another worker after --ack-wait.

Every flag can also be set by the environment variable named in its help; the flag wins.
OpenTelemetry tracing is configured by the standard OTEL_* variables (none: no export).
With --http (AGATE_HTTP_ADDR) the worker serves /healthz (alive), /readyz (200 when it is
connected to NATS and pulling jobs; 503 with what is not, in JSON) and /metrics (Prometheus);
--pprof adds Go's profiles under /debug/pprof/. A port alone (:8080) listens on 127.0.0.1;
give an address (0.0.0.0:8080) to be reached from elsewhere. "worker healthcheck" asks /readyz
and exits 0 or 1, for a container health check.
SIGINT or SIGTERM stops fetching and lets running jobs finish (up to --drain-timeout).`,
		SilenceUsage: true, // an error message, not the help, when the worker fails
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return run(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(f, name, env) }
	f.StringVar(&o.natsURL, "nats-url", defaultNATSURL, "NATS server URL(s), comma-separated")
	bind("nats-url", "NATS_URL")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file (JWT and NKey seed)")
	bind("nats-creds", "NATS_CREDS")
	f.StringVar(&o.natsCA, "nats-ca", "", "PEM file of the CA that signed the NATS server's TLS certificate")
	bind("nats-ca", "NATS_CA")
	f.StringVar(&o.namespace, "namespace", "default", "scheduler namespace whose jobs to run ([A-Za-z0-9_-]{1,64})")
	bind("namespace", "AGATE_NAMESPACE")
	f.StringVar(&o.instanceID, "instance-id", "", "name of this worker in completion events (default: host name + random suffix, chosen at start)")
	bind("instance-id", "AGATE_INSTANCE_ID")
	f.IntVar(&o.concurrency, "concurrency", 10, "jobs run at once, across all job types")
	bind("concurrency", "AGATE_CONCURRENCY")
	f.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "how long before a silent worker's job is redelivered (running jobs heartbeat every ack-wait/3)")
	bind("ack-wait", "AGATE_ACK_WAIT")
	f.IntVar(&o.maxDeliver, "max-deliver", 5, "attempts per fire; the last failure is final")
	bind("max-deliver", "AGATE_MAX_DELIVER")
	f.IntVar(&o.outcomeBatch, "outcome-batch", worker.OutcomeBatchDefault, "most job outcomes published in one message: those that finish while the previous ones are being stored go together; 1 publishes each alone (for readers of the DONE stream that do not read batches)")
	bind("outcome-batch", "AGATE_OUTCOME_BATCH")
	f.DurationVar(&o.jobTimeout, "job-timeout", 5*time.Minute, "timeout of a job whose definition sets none")
	bind("job-timeout", "AGATE_JOB_TIMEOUT")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "on shutdown, how long running jobs may take to finish before they are left for redelivery")
	bind("drain-timeout", "AGATE_DRAIN_TIMEOUT")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bind("log-level", "AGATE_LOG_LEVEL")
	f.Var(&o.httpAllow, "http-allow", "destinations http jobs may reach although refused by default (loopback, link-local, cloud metadata, unspecified): comma-separated CIDRs, IP addresses and host names (a name is allowed whatever it resolves to)")
	bind("http-allow", "AGATE_HTTP_ALLOW")
	cli.AddHTTPFlags(f, &o.http, "")
	cmd.AddCommand(cli.HealthcheckCommand())
	cli.Setup(cmd, "worker")
	return cmd
}

func run(ctx context.Context, o options) error {
	log, err := cli.NewLogger(os.Stderr, o.logLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	return runWorker(ctx, o, log)
}

func runWorker(ctx context.Context, o options, log *slog.Logger) error {
	if err := events.ValidateNamespace(o.namespace); err != nil {
		return fmt.Errorf("--namespace: %w", err)
	}
	if o.outcomeBatch < 1 {
		return fmt.Errorf("--outcome-batch %d: give at least 1 (1 publishes each outcome in a message of its own)", o.outcomeBatch)
	}
	if o.instanceID == "" {
		o.instanceID = events.NewInstanceID("worker")
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Info("shutting down; send the signal again to exit at once")
		stop() // a second signal gets the default behaviour: exit now
	}()

	srv, err := cli.StartHTTP(ctx, o.http, "agate-worker", log)
	if err != nil {
		return err
	}
	defer srv.Stop(ctx) // after the worker drained: /readyz says it stopped pulling meanwhile
	shutdownTelemetry, err := telemetry.Setup(ctx, "agate-worker")
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdownTelemetry(sctx); err != nil {
			log.Warn("flushing traces failed", "error", err)
		}
	}()

	nc, err := natsconn.Connect(ctx, natsconn.Config{URL: o.natsURL, Name: "agate-worker " + o.instanceID,
		Creds: o.natsCreds, CA: o.natsCA, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := nc.FlushTimeout(5 * time.Second); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			log.Warn("flushing the last acks to NATS failed", "error", err)
		}
		nc.Close()
	}()
	// A completion whose acknowledgement never comes is given up after 10 s and published again
	// (worker.publish retries); the timeout frees its place among the awaited ones.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("opening JetStream: %w", err)
	}

	reg := worker.NewRegistry()
	worker.RegisterBuiltins(reg, worker.BuiltinOptions{HTTPAllow: o.httpAllow})
	w, err := worker.New(worker.Config{
		Namespace:      o.namespace,
		InstanceID:     o.instanceID,
		Concurrency:    o.concurrency,
		AckWait:        o.ackWait,
		MaxDeliver:     o.maxDeliver,
		OutcomeBatch:   o.outcomeBatch,
		DefaultTimeout: o.jobTimeout,
		DrainTimeout:   o.drainTimeout,
		Logger:         log,
		MeterProvider:  srv.MeterProvider(),
	}, js, reg)
	if err != nil {
		return err
	}
	srv.AddProbes(w.Probes()...)
	log.Info("connected to NATS", "server", natsconn.Redact(nc.ConnectedUrl()), "instance", o.instanceID)
	return w.Run(ctx)
}
