// Command scheduler runs an Agate scheduler node (run), applies migrations (migrate), starts
// an all-in-one development cluster (dev), or prints the NATS users and permissions of a
// namespace (nats-config). Configuration comes from flags and environment
// variables only; a flag wins over its variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/cli"
	"github.com/agatesched/agate/internal/devenv/devcluster"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/natsperm"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
)

func main() {
	cli.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal, a second one gets the default behaviour: exit at once.
	context.AfterFunc(ctx, stop)
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		var st exitStatus
		if errors.As(err, &st) {
			os.Exit(st.code)
		}
		os.Exit(1)
	}
}

// defaultNATSURL is nats.go's DefaultURL, the local server.
const defaultNATSURL = "nats://127.0.0.1:4222"

// options are the settings of run, migrate and dev.
type options struct {
	databaseURL string
	natsURL     string
	natsCreds   string
	natsCA      string
	logLevel    string
	node        node.Config
	jobTypes    []string
	dataDir     string
	natsPort    int
	http        cli.HTTP // the HTTP listener: health, readiness, metrics
	ui          uiOptions
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "scheduler",
		Short: "Agate scheduler node: acquires and fires due triggers, publishes JobFired events",
		Long: `An Agate scheduler node. Any number of nodes share one PostgreSQL database and one NATS
JetStream; they acquire due triggers under Quartz's lock protocol, fire each exactly once,
and publish a JobFired event per fire for workers to run.

Commands:
  run      run a node (the default)
  migrate  apply database migrations and exit
  replay   rebuild a namespace's tables from its event log and diff them against the live ones
  dev      all-in-one development cluster: embedded NATS, local PostgreSQL, a node, a worker
  nats-config  print the NATS account, users and permissions of one or more namespaces
  healthcheck  exit 0 when the node listening on --http is ready (a container health check)

Every flag can also be set by the environment variable named in its help; the flag wins.
OpenTelemetry tracing is configured by the standard OTEL_* variables (none: no export).
With --http (AGATE_HTTP_ADDR) a node serves /healthz (alive), /readyz (200 when its database and
JetStream answer, it is a member of the cluster and its loops run; 503 with what is not, in JSON)
and /metrics (Prometheus); --pprof adds Go's profiles under /debug/pprof/. A port alone (:8080)
listens on 127.0.0.1; give an address (0.0.0.0:8080) to be reached from elsewhere.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	o := &options{}
	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run a scheduler node until SIGINT/SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runNode(cmd.Context(), o)
		},
	}
	addNodeFlags(runCmd, o)
	addHTTPFlags(runCmd, o, "")
	f := runCmd.Flags()
	f.StringVar(&o.databaseURL, "database-url", "", "PostgreSQL connection URL; required")
	cli.BindEnv(f, "database-url", "DATABASE_URL")
	f.StringVar(&o.natsURL, "nats-url", defaultNATSURL, "NATS server URL(s), comma-separated")
	cli.BindEnv(f, "nats-url", "NATS_URL")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file, JWT and NKey seed")
	cli.BindEnv(f, "nats-creds", "NATS_CREDS")
	f.StringVar(&o.natsCA, "nats-ca", "", "PEM file of the CA of the NATS servers' TLS certificates")
	cli.BindEnv(f, "nats-ca", "NATS_CA")

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply database migrations and exit (nodes also migrate at start)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return migrate(cmd.Context(), o.databaseURL)
		},
	}
	migrateCmd.Flags().StringVar(&o.databaseURL, "database-url", "", "PostgreSQL connection URL; required")
	cli.BindEnv(migrateCmd.Flags(), "database-url", "DATABASE_URL")

	root.AddCommand(runCmd, migrateCmd, replayCommand(), devCommand(), natsConfigCommand(), cli.HealthcheckCommand())
	// "scheduler" alone runs a node, as "scheduler run" does.
	root.RunE = runCmd.RunE
	root.Flags().AddFlagSet(runCmd.Flags())
	cli.Setup(root, "scheduler")
	return root
}

func devCommand() *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "All-in-one development cluster: embedded NATS JetStream, local PostgreSQL, one node, one worker",
		Long: `Starts everything Agate needs on this machine and loads an example schedule:
  - NATS with JetStream, embedded, storing in <data-dir>/nats (port --nats-port, or a free one);
  - PostgreSQL from the machine's binaries, data in <data-dir>/postgres, unless --database-url
    (DATABASE_URL) names a database (scripts/ensure-postgres.sh installs the binaries when they
    are missing);
  - one scheduler node and one worker with the built-in job types (noop, sleep, log, http);
  - one HTTP listener for both on --http (default ` + devHTTPAddr + `, a free port if that one is
    taken; empty: none): /healthz, /readyz (the node's conditions and the worker's) and /metrics
    (the node's metrics and the worker's).
Lines show triggers being scheduled, jobs fired, run and completed. Ctrl-C stops everything
cleanly (exit status 0); running it again picks up where it left off.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDev(cmd.Context(), o)
		},
	}
	addNodeFlags(cmd, o)
	addHTTPFlags(cmd, o, devHTTPAddr)
	f := cmd.Flags()
	f.StringVar(&o.dataDir, "data-dir", ".agate-dev", "where dev mode keeps PostgreSQL and JetStream data")
	cli.BindEnv(f, "data-dir", "AGATE_DEV_DIR")
	f.IntVar(&o.natsPort, "nats-port", 4222, "port of the embedded NATS server (a free one if taken)")
	cli.BindEnv(f, "nats-port", "AGATE_DEV_NATS_PORT")
	f.StringVar(&o.databaseURL, "database-url", "", "use this PostgreSQL database instead of starting one in <data-dir>/postgres")
	cli.BindEnv(f, "database-url", "DATABASE_URL")
	return cmd
}

func natsConfigCommand() *cobra.Command {
	var namespaces []string
	cmd := &cobra.Command{
		Use:   "nats-config",
		Short: "Print the NATS account, users and permissions of one or more namespaces",
		Long: `Prints the accounts block of a nats-server configuration: one JetStream account, AGATE, and
per namespace a scheduler, a worker and a producer user, each allowed only what its role needs
(docs/contract.md, "NATS permissions"). Passwords are read by nats-server from the environment
variables the block names (NATS_SCHEDULER_PASSWORD, ...). Add the server settings (ports,
JetStream storage, cluster, TLS) around it, as deploy/nats/nats.conf does for "default".

--namespace may be repeated; every namespace after a first one needs its own user prefix,
given as <ns>:<prefix> (users <prefix>scheduler, ..., variables NATS_<PREFIX>SCHEDULER_PASSWORD, ...).`,
		Example: `  scheduler nats-config --namespace default
  scheduler nats-config --namespace default --namespace billing:billing-`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conf, err := natsperm.ConfigFromArgs(namespaces)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), conf)
			return err
		},
	}
	cmd.Flags().StringArrayVar(&namespaces, "namespace", []string{"default"}, "namespace, or <ns>:<user prefix>; repeat for several")
	return cmd
}

// addNodeFlags adds the settings of a scheduler node, shared by run and dev.
func addNodeFlags(cmd *cobra.Command, o *options) {
	f := cmd.Flags()
	bind := func(name, env string) { cli.BindEnv(f, name, env) }
	f.StringVar(&o.node.Namespace, "namespace", "default", "scheduler namespace, Quartz's scheduler name")
	bind("namespace", "AGATE_NAMESPACE")
	f.StringVar(&o.node.InstanceID, "instance-id", "", "this node's id in the cluster (default: host name + random suffix, chosen at start)")
	bind("instance-id", "AGATE_INSTANCE_ID")
	f.StringVar(&o.node.LockMode, "lock-mode", "partitioned", "lock protocol: partitioned (--partitions rows; nodes acquire different partitions at once) or global (one TRIGGER_ACCESS row, exactly as Quartz); every node of a namespace must use the same")
	bind("lock-mode", "AGATE_LOCK_MODE")
	f.IntVar(&o.node.Partitions, "partitions", node.PartitionsDefault, "lock partitions in partitioned mode; a job's triggers share one")
	bind("partitions", "AGATE_PARTITIONS")
	f.IntVar(&o.node.PartitionsAtOnce, "partitions-at-once", node.PartitionsAtOnceDefault, "transactions in different lock partitions each of the node's loops (acquiring a backlog, the fire queue, completions) runs at once, at most 16; more helps only when PostgreSQL has cores to spare (every node runs that many), and each holds one of the connections the node's loops share (pool_max_conns in the URL, default 16)")
	bind("partitions-at-once", "AGATE_PARTITIONS_AT_ONCE")
	f.IntVar(&o.node.Batch, "batch", node.BatchDefault, "most triggers acquired and fired in one transaction")
	bind("batch", "AGATE_BATCH")
	f.IntVar(&o.node.EventBatch, "event-batch", node.EventBatchDefault, "most events of the EVENTS stream published in one message; 1 publishes each alone, for readers of the EVENTS stream that do not read batches")
	bind("event-batch", "AGATE_EVENT_BATCH")
	f.IntVar(&o.node.FireBatch, "fire-batch", node.FireBatchDefault, "most JobFired of one transaction and job type published in one message (a batch, which one worker runs and acknowledges once all its fires ended); 1 publishes each alone, for workers that do not read batches")
	bind("fire-batch", "AGATE_FIRE_BATCH")
	f.DurationVar(&o.node.FireAhead, "fire-ahead", node.FireAheadDefault, "claim triggers this long before they are due")
	bind("fire-ahead", "AGATE_FIRE_AHEAD")
	f.DurationVar(&o.node.PollInterval, "poll-interval", node.PollIntervalDefault, "longest wait between acquire passes when nothing wakes the node")
	bind("poll-interval", "AGATE_POLL_INTERVAL")
	f.DurationVar(&o.node.MisfireThreshold, "misfire-threshold", node.MisfireThresholdDefault, "how late a trigger may fire before its misfire instruction applies")
	bind("misfire-threshold", "AGATE_MISFIRE_THRESHOLD")
	f.DurationVar(&o.node.CheckinInterval, "checkin-interval", node.CheckinIntervalDefault, "cluster check-in interval; a node silent for 2x this + 7.5s is recovered")
	bind("checkin-interval", "AGATE_CHECKIN_INTERVAL")
	f.IntVar(&o.node.WorkerMaxDeliver, "max-deliver", node.WorkerMaxDeliverDefault, "the workers' --max-deliver (same variable): with --job-timeout and --abandon-grace, tells when an execution with no outcome can no longer finish")
	bind("max-deliver", "AGATE_MAX_DELIVER")
	f.DurationVar(&o.node.WorkerJobTimeout, "job-timeout", node.WorkerJobTimeoutDefault, "the workers' --job-timeout (same variable), for jobs that set no timeout")
	bind("job-timeout", "AGATE_JOB_TIMEOUT")
	f.DurationVar(&o.node.AbandonGrace, "abandon-grace", node.AbandonGraceDefault, "an execution with no outcome this long after max-deliver attempts of its job's timeout is abandoned: fired again if its job requests recovery, else failed finally")
	bind("abandon-grace", "AGATE_ABANDON_GRACE")
	f.DurationVar(&o.node.EventRetention, "event-retention", node.EventRetentionDefault, "how long the event log keeps events; whole days are dropped once a snapshot covers them and no execution in flight needs them; 0 keeps every event")
	bind("event-retention", "AGATE_EVENT_RETENTION")
	f.DurationVar(&o.node.SnapshotInterval, "snapshot-interval", node.SnapshotIntervalDefault, "how often a node stores a snapshot of the event log's projection (replay starts from the latest)")
	bind("snapshot-interval", "AGATE_SNAPSHOT_INTERVAL")
	f.DurationVar(&o.node.VacuumInterval, "vacuum-interval", node.VacuumIntervalDefault, "how often a node looks at the tables every fire rewrites (triggers, fired_triggers, job_details) and VACUUMs those whose dead rows reached half their live ones: a busy flow makes dead rows faster than autovacuum, which visits a database once a minute, cleans them; one node of a database at a time, and only tables its database user owns; 0 leaves them to autovacuum")
	bind("vacuum-interval", "AGATE_VACUUM_INTERVAL")
	f.StringSliceVar(&o.jobTypes, "job-types", nil, "job types accepted besides the built-in "+strings.Join(node.BuiltinJobTypes(), ", ")+" (comma-separated)")
	bind("job-types", "AGATE_JOB_TYPES")
	f.IntVar(&o.node.MaxCommandBytes, "max-command-bytes", node.MaxCommandBytesDefault, "largest command body accepted, in bytes")
	bind("max-command-bytes", "AGATE_MAX_COMMAND_BYTES")
	f.IntVar(&o.node.Streams.Replicas, "stream-replicas", node.StreamReplicasDefault, "JetStream servers storing each of the namespace's four streams: at most the cluster's servers (1 without a cluster, 3 on a cluster of three so a stream survives losing a server), at most 5; applied to existing streams at start")
	bind("stream-replicas", "AGATE_STREAM_REPLICAS")
	f.DurationVar(&o.node.Streams.MaxAge, "stream-max-age", node.StreamMaxAgeDefault, "how long each stream keeps a message, consumed or not; applied to existing streams at start")
	bind("stream-max-age", "AGATE_STREAM_MAX_AGE")
	f.Int64Var(&o.node.Streams.MaxBytes, "stream-max-bytes", node.StreamMaxBytesDefault, "size cap of each stream in bytes, 0 for none; a full stream drops its oldest messages, consumed or not, so size it well above the largest backlog; applied to existing streams at start")
	bind("stream-max-bytes", "AGATE_STREAM_MAX_BYTES")
	f.DurationVar(&o.node.Streams.DuplicateWindow, "stream-duplicate-window", node.DuplicateWindowDefault, "how long JetStream remembers a message's Nats-Msg-Id to drop a second copy (republished events, retried commands); at most --stream-max-age; applied to existing streams at start")
	bind("stream-duplicate-window", "AGATE_STREAM_DUPLICATE_WINDOW")
	f.DurationVar(&o.node.IdempotencyWindow, "idempotency-window", node.IdempotencyWindowDefault, "how long a command's outcome is remembered under its id: sent again within it, a command is answered as the first time; after it, handled as new; older outcomes (and rejected bodies) are deleted; at least --stream-max-age")
	bind("idempotency-window", "AGATE_IDEMPOTENCY_WINDOW")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	bind("log-level", "AGATE_LOG_LEVEL")
}

// nodeConfig completes the node's settings from the flags: its id when none was given, and the
// job types it accepts.
func (o *options) nodeConfig() (node.Config, error) {
	cfg := o.node
	if cfg.InstanceID == "" {
		cfg.InstanceID = events.NewInstanceID("scheduler")
	}
	cfg.JobTypes = append(node.BuiltinJobTypes(), o.jobTypes...)
	if cfg.EventBatch < 1 {
		return cfg, fmt.Errorf("--event-batch %d: give at least 1 (1 publishes each event in a message of its own)", cfg.EventBatch)
	}
	if cfg.FireBatch < 1 || cfg.FireBatch > node.MaxFireBatch {
		return cfg, fmt.Errorf("--fire-batch %d: give 1 to %d (1 publishes each JobFired in a message of its own)", cfg.FireBatch, node.MaxFireBatch)
	}
	if cfg.EventRetention == 0 {
		cfg.EventRetention = -1 // the flag's 0 keeps every event; the Config's 0 is the default
	}
	if cfg.VacuumInterval == 0 {
		cfg.VacuumInterval = -1 // the flag's 0 leaves the tables to autovacuum
	}
	return cfg, cfg.Validate()
}

func runNode(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(os.Stderr, o.logLevel)
	if err != nil {
		return err
	}
	if o.databaseURL == "" {
		return errors.New("no database: set DATABASE_URL or --database-url (or try `scheduler dev`)")
	}
	cfg, err := o.nodeConfig()
	if err != nil {
		return err
	}
	cfg.Logger = log
	stopHTTP, err := serveHTTP(ctx, o, log, &cfg)
	if err != nil {
		return err
	}
	defer stopHTTP()
	shutdown, err := telemetry.Setup(ctx, "agate-scheduler")
	if err != nil {
		return err
	}
	defer func() { _ = shutdown(context.WithoutCancel(ctx)) }()
	pool, err := store.Open(ctx, o.databaseURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, err := natsconn.Connect(ctx, natsconn.Config{URL: o.natsURL, Name: "agate-scheduler " + cfg.InstanceID,
		Creds: o.natsCreds, CA: o.natsCA, Logger: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	return stopped(ctx, node.Run(ctx, cfg, pool, nc))
}

func runDev(ctx context.Context, o *options) error {
	log, err := cli.NewLogger(os.Stderr, o.logLevel)
	if err != nil {
		return err
	}
	cfg, err := o.nodeConfig()
	if err != nil {
		return err
	}
	return stopped(ctx, devcluster.Run(ctx, devcluster.Config{DataDir: o.dataDir, NATSPort: o.natsPort,
		DatabaseURL: o.databaseURL, Node: cfg, Logger: log, HTTP: o.http.Addr, Pprof: o.http.Pprof, UI: o.ui.config()}))
}

func migrate(ctx context.Context, databaseURL string) error {
	if databaseURL == "" {
		return errors.New("no database: set DATABASE_URL or --database-url")
	}
	pool, err := store.Open(ctx, databaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := store.Migrate(ctx, pool); err != nil {
		return err
	}
	fmt.Println("database schema is up to date")
	return nil
}

// stopped is err, except that a stop asked for by SIGINT or SIGTERM is a success: the process
// then exits with status 0.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
