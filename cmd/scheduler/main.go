// Command scheduler runs an Agate scheduler node (run), applies migrations (migrate), or starts
// an all-in-one development cluster (dev). Configuration comes from flags and environment
// variables only; a flag wins over its variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/agatesched/agate/internal/acquire"
	"github.com/agatesched/agate/internal/command"
	"github.com/agatesched/agate/internal/events"
	"github.com/agatesched/agate/internal/natsconn"
	"github.com/agatesched/agate/internal/node"
	"github.com/agatesched/agate/internal/store"
	"github.com/agatesched/agate/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

// options are the settings shared by run and dev.
type options struct {
	databaseURL string
	natsURL     string
	natsCreds   string
	natsCA      string
	logLevel    string
	node        node.Config
	jobTypes    []string
}

func env(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
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
  dev      all-in-one development cluster: embedded NATS, local PostgreSQL, a node, a worker`,
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
	runCmd.Flags().StringVar(&o.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL connection URL (env DATABASE_URL); required")
	runCmd.Flags().StringVar(&o.natsURL, "nats-url", env("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated (env NATS_URL)")
	runCmd.Flags().StringVar(&o.natsCreds, "nats-creds", env("NATS_CREDS", ""), "NATS credentials file, JWT and NKey seed (env NATS_CREDS)")
	runCmd.Flags().StringVar(&o.natsCA, "nats-ca", env("NATS_CA", ""), "PEM file of the CA of the NATS servers' TLS certificates (env NATS_CA)")

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply database migrations and exit (nodes also migrate at start)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.databaseURL == "" {
				return errors.New("no database: set DATABASE_URL or --database-url")
			}
			pool, err := store.Open(cmd.Context(), o.databaseURL, 2)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := store.Migrate(cmd.Context(), pool); err != nil {
				return err
			}
			fmt.Println("database schema is up to date")
			return nil
		},
	}
	migrateCmd.Flags().StringVar(&o.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL connection URL (env DATABASE_URL)")

	root.AddCommand(runCmd, migrateCmd, devCommand())
	// "scheduler" alone runs a node, as "scheduler run" does.
	root.RunE = runCmd.RunE
	root.Flags().AddFlagSet(runCmd.Flags())
	return root
}

func addNodeFlags(cmd *cobra.Command, o *options) {
	f := cmd.Flags()
	f.StringVar(&o.node.Namespace, "namespace", env("AGATE_NAMESPACE", "default"), "scheduler namespace, Quartz's scheduler name (env AGATE_NAMESPACE)")
	f.StringVar(&o.node.InstanceID, "instance-id", env("AGATE_INSTANCE_ID", events.NewInstanceID("scheduler")), "this node's id in the cluster (env AGATE_INSTANCE_ID; default host name + random suffix)")
	f.StringVar(&o.node.LockMode, "lock-mode", env("AGATE_LOCK_MODE", "partitioned"), "lock protocol: partitioned (--partitions rows; nodes acquire different partitions at once) or global (one TRIGGER_ACCESS row, exactly as Quartz); every node of a namespace must use the same (env AGATE_LOCK_MODE)")
	f.IntVar(&o.node.Partitions, "partitions", node.PartitionsDefault, "lock partitions in partitioned mode; a job's triggers share one")
	f.IntVar(&o.node.Batch, "batch", 500, "most triggers acquired and fired in one transaction")
	f.DurationVar(&o.node.FireAhead, "fire-ahead", acquire.FireAheadDefault, "claim triggers this long before they are due")
	f.DurationVar(&o.node.PollInterval, "poll-interval", time.Second, "longest wait between acquire passes when nothing wakes the node")
	f.DurationVar(&o.node.MisfireThreshold, "misfire-threshold", time.Minute, "how late a trigger may fire before its misfire instruction applies")
	f.DurationVar(&o.node.CheckinInterval, "checkin-interval", 5*time.Second, "cluster check-in interval; a node silent for 2x this + 7.5s is recovered")
	f.StringSliceVar(&o.jobTypes, "job-types", nil, "job types accepted besides the built-in "+strings.Join(command.BuiltinJobTypes, ", ")+" (comma-separated)")
	f.IntVar(&o.node.MaxCommandBytes, "max-command-bytes", command.MaxBodyBytesDefault, "largest command body accepted")
	f.StringVar(&o.logLevel, "log-level", env("AGATE_LOG_LEVEL", "info"), "debug, info, warn or error (env AGATE_LOG_LEVEL)")
}

func newLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})), nil
}

func runNode(ctx context.Context, o *options) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	if o.databaseURL == "" {
		return errors.New("no database: set DATABASE_URL or --database-url (or try `scheduler dev`)")
	}
	o.node.Logger = log
	o.node.JobTypes = append(append([]string{}, command.BuiltinJobTypes...), o.jobTypes...)
	if err := o.node.Validate(); err != nil {
		return err
	}
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
	nc, err := natsconn.Connect(natsconn.Config{URL: o.natsURL, Name: "agate-scheduler " + o.node.InstanceID,
		Creds: o.natsCreds, CA: o.natsCA, Logger: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	return node.Run(ctx, o.node, pool, nc)
}
